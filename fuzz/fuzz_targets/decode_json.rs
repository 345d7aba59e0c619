//! The JSON payload decoder (`from_json`): no panic, PERMISSIVE keeps one row
//! per record, DROPMALFORMED drops exactly the malformed ones, and a record
//! is malformed exactly as serde_json and the schema say (see
//! `weir_fuzz::check_decoder` and `oracle` below).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_engine::plan::{DataType, Field};
use weir_fuzz::{check_decoder, decode_case};

/// `Some(true)`: not one JSON object (serde_json) — must be malformed.
/// `Some(false)`: one object, no duplicate keys, each schema field absent,
/// null or of its plain JSON type — must be well-formed. Else no claim.
fn oracle(record: &[u8], fields: &[Field]) -> Option<bool> {
    let v: serde_json::Value = match serde_json::from_slice(record) {
        Ok(v) => v,
        Err(_) => return Some(true),
    };
    let Some(obj) = v.as_object() else {
        return Some(true);
    };
    if has_duplicate_keys(record) {
        return None;
    }
    for f in fields {
        let plain = match obj.get(&f.name) {
            None | Some(serde_json::Value::Null) => true,
            Some(v) => match f.dtype {
                DataType::String => v.is_string(),
                DataType::Int64 => v.is_i64(),
                DataType::Int32 => v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
                DataType::Bool => v.is_boolean(),
                _ => false,
            },
        };
        if !plain {
            return None;
        }
    }
    Some(false)
}

/// Whether the top-level object repeats a key.
fn has_duplicate_keys(record: &[u8]) -> bool {
    struct Keys(bool);
    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut m: A,
                ) -> Result<Keys, A::Error> {
                    let mut seen = std::collections::BTreeSet::new();
                    let mut dup = false;
                    while let Some(k) = m.next_key::<String>()? {
                        m.next_value::<serde::de::IgnoredAny>()?;
                        dup |= !seen.insert(k);
                    }
                    Ok(Keys(dup))
                }
            }
            d.deserialize_map(V)
        }
    }
    serde_json::from_slice::<Keys>(record)
        .map(|k| k.0)
        .unwrap_or(true)
}

fuzz_target!(|data: &[u8]| {
    if let Some(case) = decode_case(data, false) {
        if case.records.len() <= 64 {
            check_decoder(&case, oracle);
        }
    }
});
