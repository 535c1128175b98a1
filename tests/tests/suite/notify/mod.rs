//! Run notifications: the outbox that the terminal transition of every run that notifies
//! writes (`outbox`), signed deliveries with retries to real receivers on loopback
//! (`delivery`), and the real daemon SIGKILLed around them (`crash`).

mod crash;
mod delivery;
mod outbox;
mod receiver;
