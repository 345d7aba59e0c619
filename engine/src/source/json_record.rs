//! Whether a record is one JSON object and nothing else, by serde_json's
//! grammar: the check `from_json` makes of every record before Arrow's
//! decoder reads it (Arrow's decoder is laxer: it takes commas as
//! whitespace, keeps raw control characters in strings and reads numbers out
//! of range when the schema does not ask for them).
//!
//! Most records are checked by serde_json's grammar alone (`IgnoredAny`:
//! nothing decoded, nothing built) plus one UTF-8 pass; only a record that
//! could fail the full parse where the grammar passes (a `\u` escape, an
//! exponent, a long run of digits, deep nesting) is parsed in full, and so
//! is any record the fast check refuses, so that its error is the full
//! parse's. The fast check accepts only what the full parse accepts (a
//! property test holds it to that), so the verdict is the full parse's.

/// `Ok` when `record` is one JSON object and nothing else, by serde_json's
/// full parse (strings decoded, numbers converted), without building it.
pub(crate) fn check_json_object(record: &[u8]) -> Result<(), String> {
    if !needs_full_parse(record) && grammar_accepts(record) {
        return Ok(());
    }
    full_check(record)
}

/// Whether serde_json's full parse could refuse `record` where its grammar
/// check accepts it: a `\u` escape (a lone surrogate), an exponent or a
/// run of 64 digits (a number beyond `f64`), or more than 100 brackets (the
/// parser's recursion limit of 128; the grammar check has none). Bytes
/// inside strings count too: a false alarm costs only the full parse.
///
/// Each is found by a vectorized search (`memchr`) rather than a loop over
/// every byte: a backslash followed by `u`; an `e` or `E` after a digit;
/// the brackets counted; and the digit runs scanned only when an aligned
/// block of 32 bytes is all digits, which every run of 64 holds.
fn needs_full_parse(record: &[u8]) -> bool {
    let after = |i: usize, what: fn(&u8) -> bool| record.get(i).is_some_and(what);
    memchr::memchr_iter(b'\\', record).any(|i| after(i + 1, |b| *b == b'u'))
        || memchr::memchr2_iter(b'e', b'E', record)
            .any(|i| i > 0 && after(i - 1, u8::is_ascii_digit))
        || memchr::memchr2_iter(b'[', b'{', record).nth(100).is_some()
        || (has_digit_block(record) && longest_digit_run(record) >= 64)
}

/// Whether some aligned block of 32 bytes of `record` is all digits.
fn has_digit_block(record: &[u8]) -> bool {
    record
        .chunks_exact(32)
        // `&` over the block, not `all`'s early exit, so it is vectorized.
        .any(|c| c.iter().fold(true, |all, b| all & b.is_ascii_digit()))
}

/// The longest run of digits in `record`.
fn longest_digit_run(record: &[u8]) -> usize {
    record
        .split(|b| !b.is_ascii_digit())
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0)
}

/// serde_json's grammar alone: an object first, valid UTF-8, one value.
fn grammar_accepts(record: &[u8]) -> bool {
    record
        .iter()
        .find(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
        .is_some_and(|b| *b == b'{')
        && simdutf8::basic::from_utf8(record).is_ok()
        && serde_json::from_slice::<serde::de::IgnoredAny>(record).is_ok()
}

/// serde_json's full parse of `record` as one object of any values
/// (strings decoded, numbers converted), nothing kept; its error says why not.
fn full_check(record: &[u8]) -> Result<(), String> {
    use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

    /// Any JSON value, fully parsed (strings decoded, numbers converted) and dropped.
    struct Any;
    /// A JSON object of [`Any`].
    struct Object;
    struct AnyVisitor;
    struct ObjectVisitor;

    macro_rules! accept {
        ($($f:ident: $t:ty),*) => {
            $(fn $f<E: serde::de::Error>(self, _: $t) -> Result<Any, E> {
                Ok(Any)
            })*
        };
    }
    impl<'de> Visitor<'de> for AnyVisitor {
        type Value = Any;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        accept!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_f64: f64, visit_str: &str);
        fn visit_unit<E: serde::de::Error>(self) -> Result<Any, E> {
            Ok(Any)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Any, A::Error> {
            while s.next_element::<Any>()?.is_some() {}
            Ok(Any)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Any, A::Error> {
            while m.next_entry::<Any, Any>()?.is_some() {}
            Ok(Any)
        }
    }
    impl<'de> Deserialize<'de> for Any {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Any, D::Error> {
            d.deserialize_any(AnyVisitor)
        }
    }
    impl<'de> Visitor<'de> for ObjectVisitor {
        type Value = Object;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Object, A::Error> {
            AnyVisitor.visit_map(m).map(|_| Object)
        }
    }
    impl<'de> Deserialize<'de> for Object {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Object, D::Error> {
            d.deserialize_map(ObjectVisitor)
        }
    }
    serde_json::from_slice::<Object>(record)
        .map(|_| ())
        .map_err(|e| format!("a record must be one JSON object: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_plain_record_takes_the_fast_check() {
        let click = br#"{"page":"/page/17","event_ts":"2024-01-01T00:00:00.000Z","user":"u42"}"#;
        assert!(!needs_full_parse(click));
        assert!(grammar_accepts(click));
        assert!(check_json_object(click).is_ok());
    }

    #[test]
    fn what_only_the_full_parse_refuses_goes_to_it() {
        // Each passes the grammar check and fails the full parse.
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        let long = format!("{{\"a\":{}}}", "9".repeat(400));
        for rec in [
            r#"{"a":1e400}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\udc00x"}"#,
            deep.as_str(),
            long.as_str(),
        ] {
            let rec = rec.as_bytes();
            assert!(grammar_accepts(rec), "{}", String::from_utf8_lossy(rec));
            assert!(needs_full_parse(rec), "{}", String::from_utf8_lossy(rec));
            assert!(check_json_object(rec).is_err());
        }
        for rec in [&b"[1]"[..], b"\"a\"", b"{\"a\":\"\xff\"}", b"{} {}"] {
            assert!(!grammar_accepts(rec));
            assert!(check_json_object(rec).is_err());
        }
    }

    #[test]
    fn the_fast_paths_limits_sit_inside_the_full_parses() {
        // 100 brackets (the object and 99 arrays), the most the fast path
        // takes: the full parse (128 deep at most) accepts them.
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(99), "]".repeat(99));
        assert!(!needs_full_parse(deep.as_bytes()));
        assert!(full_check(deep.as_bytes()).is_ok());
        let deeper = format!("{{\"a\":{}1{}}}", "[".repeat(100), "]".repeat(100));
        assert!(needs_full_parse(deeper.as_bytes()));
        // 63 digits either side of the point, the most it takes: in range.
        let wide = format!("{{\"a\":-{}.{}}}", "9".repeat(63), "9".repeat(63));
        assert!(!needs_full_parse(wide.as_bytes()));
        assert!(full_check(wide.as_bytes()).is_ok());
    }

    /// Bits of JSON, right and wrong, that a record is made of.
    fn piece() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::sample::select(vec![
                "{",
                "}",
                "[",
                "]",
                ",",
                ":",
                "\"",
                "\\",
                "\\u",
                "\\ud83d",
                "\\ude00",
                "\\ud800",
                "\\n",
                "\\x",
                "u",
                "e",
                "E",
                "1e400",
                "1e308",
                "-",
                "+",
                ".",
                "0",
                "7",
                "12345678901234567890",
                " ",
                "\t",
                "\n",
                "true",
                "null",
                "fals",
                "\"a\"",
                "\"page\":",
                "é",
                "\u{1}",
            ])
            .prop_map(|s| s.as_bytes().to_vec()),
            any::<u8>().prop_map(|b| vec![b]),
        ]
    }

    /// A JSON number as text, by the grammar: up to 400 digits, a fraction,
    /// an exponent up to 4 digits (so beyond `f64` often).
    fn number() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            "[1-9][0-9]{0,399}|0",
            prop::option::of("[0-9]{1,20}"),
            prop::option::of(("[eE]", "[+-]?", "[0-9]{1,4}")),
        )
            .prop_map(|(neg, int, frac, exp)| {
                let mut n = String::new();
                if neg {
                    n.push('-');
                }
                n.push_str(&int);
                if let Some(f) = frac {
                    n.push('.');
                    n.push_str(&f);
                }
                if let Some((e, sign, d)) = exp {
                    n.push_str(&(e + &sign + &d));
                }
                n
            })
    }

    /// A JSON string as text, by the grammar: any characters but `"`, `\`
    /// and controls, and every escape, `\u` with any code unit (surrogates
    /// alone or in pairs).
    fn string() -> impl Strategy<Value = String> {
        let part = prop_oneof![
            "[^\"\\\\\u{0}-\u{1f}]{0,4}",
            prop::sample::select(vec!["\\n", "\\\"", "\\\\", "\\/", "\\b", "\\t"])
                .prop_map(String::from),
            prop_oneof![0u16..=0xffff, 0xd800u16..=0xdfff].prop_map(|u| format!("\\u{u:04x}")),
        ];
        prop::collection::vec(part, 0..5).prop_map(|p| format!("\"{}\"", p.concat()))
    }

    /// A JSON value as text, by the grammar, nested up to 200 deep.
    fn value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            number(),
            string(),
            prop::sample::select(vec!["true", "false", "null"]).prop_map(String::from),
        ];
        let tree = leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((string(), inner), 0..4).prop_map(|v| {
                    let kv: Vec<String> =
                        v.into_iter().map(|(k, v)| format!("{k} : {v}")).collect();
                    format!("{{ {} }}", kv.join(" ,"))
                }),
            ]
        });
        (tree, prop_oneof![Just(0usize), 0usize..200])
            .prop_map(|(t, depth)| format!("{}{t}{}", "[".repeat(depth), "]".repeat(depth)))
    }

    /// A JSON object as text, by the grammar (what the full parse may still
    /// refuse: numbers beyond `f64`, lone surrogates, deep nesting).
    fn object_text() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec((string(), value()), 0..4).prop_map(|v| {
            let kv: Vec<String> = v.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
            format!("{{{}}}", kv.join(",")).into_bytes()
        })
    }

    /// JSON objects that are well formed: strings of any characters (escaped
    /// by serde_json), numbers of any size, nesting.
    fn object() -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            any::<String>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            any::<bool>().prop_map(serde_json::Value::from),
            Just(serde_json::Value::Null),
        ];
        let value = leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        });
        prop::collection::btree_map("[a-z_]{1,8}", value, 0..6).prop_map(|m| {
            let o: serde_json::Map<String, serde_json::Value> = m.into_iter().collect();
            serde_json::to_vec(&o).unwrap()
        })
    }

    /// [`needs_full_parse`] byte by byte, as it was first written: the
    /// vectorized searches must give its verdict on every record.
    fn needs_full_parse_bytewise(record: &[u8]) -> bool {
        let (mut digits, mut brackets, mut prev) = (0usize, 0usize, 0u8);
        for &b in record {
            match b {
                b'0'..=b'9' => {
                    digits += 1;
                    if digits >= 64 {
                        return true;
                    }
                }
                b'e' | b'E' if prev.is_ascii_digit() => return true,
                b'u' if prev == b'\\' => return true,
                b'[' | b'{' => {
                    brackets += 1;
                    if brackets > 100 {
                        return true;
                    }
                    digits = 0;
                }
                _ => digits = 0,
            }
            prev = b;
        }
        false
    }

    #[test]
    fn runs_of_digits_are_found_wherever_they_sit() {
        // 63 and 64 digits at every offset against the aligned blocks.
        for at in 0..40 {
            for run in [31, 32, 63, 64, 65] {
                let rec = format!("{{\"a\":{}{}}}", " ".repeat(at), "7".repeat(run));
                assert_eq!(needs_full_parse(rec.as_bytes()), run >= 64, "{rec}");
                assert_eq!(needs_full_parse_bytewise(rec.as_bytes()), run >= 64);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The vectorized searches judge every record as the byte loop does:
        /// over objects with bits of JSON put anywhere in them, and long
        /// runs of digits and brackets.
        #[test]
        fn the_searches_agree_with_the_byte_loop(
            rec in object_text(),
            edits in prop::collection::vec(
                (any::<prop::sample::Index>(), prop_oneof![
                    piece(),
                    (1usize..80).prop_map(|n| vec![b'9'; n]),
                    (1usize..120).prop_map(|n| vec![b'['; n]),
                    (1usize..120).prop_map(|n| vec![b'{'; n]),
                ]),
                0..4,
            ),
        ) {
            let mut rec = rec;
            for (at, bits) in edits {
                let i = at.index(rec.len() + 1);
                rec.splice(i..i, bits);
            }
            prop_assert_eq!(
                needs_full_parse(&rec),
                needs_full_parse_bytewise(&rec),
                "{:?}",
                String::from_utf8_lossy(&rec)
            );
        }

        /// The fast check never accepts what the full parse refuses: over
        /// objects by the grammar with bits of JSON, right and wrong (stray
        /// bytes, bad UTF-8, escapes), put anywhere in them ...
        #[test]
        fn the_fast_check_accepts_only_what_the_full_parse_accepts(
            rec in object_text(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), piece()), 1..3),
        ) {
            let mut rec = rec;
            for (at, bits) in edits {
                let i = at.index(rec.len() + 1);
                rec.splice(i..i, bits);
            }
            if !needs_full_parse(&rec) && grammar_accepts(&rec) {
                prop_assert!(full_check(&rec).is_ok(), "{:?}", String::from_utf8_lossy(&rec));
            }
        }

        /// ... and over objects by the grammar, which the grammar check
        /// always accepts and the full parse sometimes refuses.
        #[test]
        fn the_fast_check_accepts_only_what_the_full_parse_accepts_by_the_grammar(
            rec in object_text(),
        ) {
            prop_assert!(grammar_accepts(&rec), "{:?}", String::from_utf8_lossy(&rec));
            if !needs_full_parse(&rec) {
                prop_assert!(full_check(&rec).is_ok(), "{:?}", String::from_utf8_lossy(&rec));
            }
        }

        /// Well-formed objects pass, by whichever path.
        #[test]
        fn a_well_formed_object_passes(rec in object()) {
            prop_assert!(check_json_object(&rec).is_ok(), "{:?}", String::from_utf8_lossy(&rec));
        }
    }
}
