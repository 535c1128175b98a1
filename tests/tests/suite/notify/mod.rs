//! Run notifications: the outbox every terminal transition writes (`outbox`).

mod outbox;
