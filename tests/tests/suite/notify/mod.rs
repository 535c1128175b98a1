//! Run notifications: signed deliveries with retries to real receivers on loopback
//! (`delivery`), and the real daemon SIGKILLed around them (`crash`). The outbox that the
//! terminal transition of every run that notifies writes is in the store's conformance suite
//! (`store-conformance/src/outbox.rs`).

mod crash;
mod delivery;
mod receiver;
