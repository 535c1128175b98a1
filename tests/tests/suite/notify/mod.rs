//! Run notifications: the outbox every terminal transition writes (`outbox`), signed
//! deliveries with retries to real receivers on loopback (`delivery`), and the real daemon
//! SIGKILLed around them (`crash`).

mod crash;
mod delivery;
mod outbox;
mod receiver;
