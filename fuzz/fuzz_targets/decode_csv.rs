//! The CSV payload decoder (`from_csv`): no panic, PERMISSIVE keeps one row
//! per record, DROPMALFORMED drops exactly the malformed ones (see
//! `weir_fuzz::check_decoder` and `oracle` below).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_engine::plan::{DataType, Field};
use weir_engine::source::PayloadFormat;
use weir_fuzz::{check_decoder, decode_case, DecodeCase};

/// For records without quotes or line breaks: the wrong number of fields
/// must be malformed; the right number, each a plain value of its type
/// (any text for a string, a canonical integer for an integer), must be
/// well-formed. Else no claim.
fn oracle(delimiter: u8) -> impl Fn(&[u8], &[Field]) -> Option<bool> {
    move |record, fields| {
        let text = std::str::from_utf8(record).ok()?;
        if text.is_empty()
            || text
                .bytes()
                .any(|b| matches!(b, b'"' | b'\n' | b'\r' | b'\\' | b'#'))
        {
            return None;
        }
        let parts: Vec<&str> = text.split(delimiter as char).collect();
        if parts.len() != fields.len() {
            return Some(true);
        }
        for (p, f) in parts.iter().zip(fields) {
            let plain = match f.dtype {
                DataType::String => true,
                DataType::Int64 => canonical_int(p)
                    .and_then(|_| p.parse::<i64>().ok())
                    .is_some(),
                DataType::Int32 => canonical_int(p)
                    .and_then(|_| p.parse::<i32>().ok())
                    .is_some(),
                _ => false,
            };
            if !plain {
                return None;
            }
        }
        Some(false)
    }
}

fn canonical_int(s: &str) -> Option<()> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let ok = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    ok.then_some(())
}

fuzz_target!(|data: &[u8]| {
    if let Some(case) = decode_case(data, true) {
        if case.records.len() <= 64 {
            let DecodeCase { format, .. } = &case;
            let PayloadFormat::Csv { delimiter } = *format else {
                unreachable!()
            };
            check_decoder(&case, oracle(delimiter));
        }
    }
});
