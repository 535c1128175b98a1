//! Exact JSON: numbers keep the text they were written with, wherever they travel.
//!
//! The workspace builds `serde_json` with `arbitrary_precision`, so a [`Value`] holds a number
//! as its text: `123456789012345678901234567890` in a model's tool input reaches the tool, the
//! log and the next request to the model unchanged, instead of becoming `1.2345678901234568e29`.
//!
//! One seam needs care: serde's internally tagged enums (`#[serde(tag = "type")]`, as
//! [`ContentBlock`](crate::ContentBlock) and the run's events are) buffer their fields before
//! they know the variant, and that buffer holds neither `serde_json`'s text-number form (which
//! a plain `u64` or `f64` field then refuses) nor an integer wider than 64 bits. The functions
//! here take the way that holds both: the text is read into a [`Value`] (which keeps every
//! number), an integer too wide for 64 bits is wrapped in the form a [`Value`] field reads back
//! exactly, and the type is read from that. Read such types with these functions, never with
//! `serde_json::from_str` or `from_value` directly.

use serde::de::DeserializeOwned;
use serde_json::{Map, Number, Value};

/// The key by which `serde_json` (with `arbitrary_precision`) spells a number as a map, so that
/// a number passes through serde's buffers as text. Private to `serde_json` but stable since
/// 2017; `a_wide_integer_survives_a_tagged_enum` fails if it ever changes.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Reads `T` from JSON text, keeping every number exact.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    from_value(serde_json::from_str(text)?)
}

/// Reads `T` from JSON bytes, keeping every number exact.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    from_value(serde_json::from_slice(bytes)?)
}

/// Reads `T` from a [`Value`], keeping every number exact.
pub fn from_value<T: DeserializeOwned>(mut value: Value) -> Result<T, serde_json::Error> {
    wrap_wide_integers(&mut value);
    serde_json::from_value(value)
}

/// Replaces, in place, every integer that fits neither `u64` nor `i64` by its text-number map.
/// Everything else is left as it is: a `Value` hands such numbers to serde as plain `u64`,
/// `i64` or `f64` (which any buffer holds), or already as the text-number map.
fn wrap_wide_integers(value: &mut Value) {
    match value {
        Value::Number(n) if is_wide_integer(n) => {
            let text = n.to_string();
            *value = Value::Object(Map::from_iter([(
                NUMBER_TOKEN.to_string(),
                Value::String(text),
            )]));
        }
        Value::Array(items) => items.iter_mut().for_each(wrap_wide_integers),
        Value::Object(map) => map.values_mut().for_each(wrap_wide_integers),
        _ => {}
    }
}

/// Whether `n` is an integer that `serde_json` would hand to serde as a 128-bit one.
fn is_wide_integer(n: &Number) -> bool {
    n.as_u64().is_none() && n.as_i64().is_none() && (n.as_u128().is_some() || n.as_i128().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContentBlock, Message};

    const WIDE: &str = "123456789012345678901234567890";

    #[test]
    fn a_wide_integer_survives_a_tagged_enum() {
        let text = format!(
            r#"{{"type":"tool_use","id":"t1","name":"n","input":{{"a":{WIDE},"b":-{WIDE},"c":1e+400,"d":0.1000000000000000000001,"e":1.0}}}}"#
        );
        let block: ContentBlock = from_str(&text).unwrap();
        let ContentBlock::ToolUse { input, .. } = &block else {
            panic!("{block:?}")
        };
        assert_eq!(
            input.to_string(),
            format!(
                r#"{{"a":{WIDE},"b":-{WIDE},"c":1e+400,"d":0.1000000000000000000001,"e":1.0}}"#
            )
        );
        // And back through a Value, as redaction and checkpoints do.
        let again: ContentBlock = from_value(serde_json::to_value(&block).unwrap()).unwrap();
        assert_eq!(again, block);
        assert_eq!(serde_json::to_string(&again).unwrap(), text);
    }

    #[test]
    fn plain_numbers_still_fill_plain_fields_inside_a_tagged_enum() {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum Tagged {
            Cost { usd: f64, tokens: u64, at: i64 },
        }
        let read: Tagged = from_str(r#"{"type":"cost","usd":0.0123,"tokens":42,"at":-7}"#).unwrap();
        assert_eq!(
            read,
            Tagged::Cost {
                usd: 0.0123,
                tokens: 42,
                at: -7
            }
        );
        // What this module exists for: serde_json alone refuses it.
        assert!(
            serde_json::from_str::<Tagged>(r#"{"type":"cost","usd":0.0123,"tokens":42,"at":-7}"#)
                .is_err()
        );
    }

    #[test]
    fn a_message_round_trips_byte_for_byte() {
        let text = format!(
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t","name":"x","input":{{"n":{WIDE}}}}}]}}"#
        );
        let message: Message = from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&message).unwrap(), text);
    }
}
