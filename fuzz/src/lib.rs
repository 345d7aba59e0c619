//! Shared helpers of weir's fuzz targets (see `fuzz_targets/`).
//!
//! The decoder targets read their input as: one configuration byte, then
//! records separated by `\n`. Inside a record, the byte `0x1f` stands for a
//! newline (so a record can hold one) and a record that is exactly `0x00` is
//! a null payload.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use weir_engine::arrow::array::{Array, ArrayRef, AsArray, BinaryArray, Int64Array};
use weir_engine::arrow::datatypes::{DataType as ArrowType, Field as ArrowField, Schema};
use weir_engine::arrow::record_batch::RecordBatch;
use weir_engine::plan::{DataType, Field};
use weir_engine::source::decode::ParseMode;
use weir_engine::source::{Decode, MemoryStream, Offset, PayloadFormat, Source};

/// One decoder case: the records (None: a null payload), the schema, the format.
#[derive(Debug, Clone)]
pub struct DecodeCase {
    /// The payloads, in order.
    pub records: Vec<Option<Vec<u8>>>,
    /// The decoded columns.
    pub fields: Vec<Field>,
    /// JSON or CSV (with its delimiter).
    pub format: PayloadFormat,
}

/// The schemas the decoder targets pick from (by the configuration byte).
pub fn schema_choice(i: u8) -> Vec<Field> {
    match i % 3 {
        0 => vec![
            Field::new("page", DataType::String),
            Field::new("n", DataType::Int64),
        ],
        1 => vec![
            Field::new("ts", DataType::Timestamp),
            Field::new("x", DataType::Float64),
            Field::new("ok", DataType::Bool),
            Field::new("i", DataType::Int32),
        ],
        _ => vec![Field::new("s", DataType::String)],
    }
}

/// Splits a fuzz input into a case (`csv`: CSV, else JSON).
pub fn decode_case(data: &[u8], csv: bool) -> Option<DecodeCase> {
    let (&config, rest) = data.split_first()?;
    let records = rest
        .split(|b| *b == b'\n')
        .map(|r| {
            if r == [0u8] {
                None
            } else {
                Some(
                    r.iter()
                        .map(|b| if *b == 0x1f { b'\n' } else { *b })
                        .collect(),
                )
            }
        })
        .collect();
    let format = if csv {
        let delimiter = match (config >> 2) % 4 {
            0 => b',',
            1 => b';',
            2 => b'\t',
            _ => b'|',
        };
        PayloadFormat::Csv { delimiter }
    } else {
        PayloadFormat::Json
    };
    Some(DecodeCase {
        records,
        fields: schema_choice(config),
        format,
    })
}

fn payloads(records: &[Option<Vec<u8>>]) -> RecordBatch {
    let values = BinaryArray::from_iter(records.iter().map(|r| r.as_deref()));
    let schema = Arc::new(Schema::new(vec![
        ArrowField::new("value", ArrowType::Binary, true),
        ArrowField::new("offset", ArrowType::Int64, true),
    ]));
    let offsets = Int64Array::from_iter_values(0..records.len() as i64);
    RecordBatch::try_new(schema, vec![Arc::new(values), Arc::new(offsets)]).unwrap()
}

/// What one decode of a batch gave.
pub struct Decoded {
    /// The output (or the error the batch failed with).
    pub result: weir_engine::Result<RecordBatch>,
    /// The decoder's malformed-record count.
    pub malformed: u64,
}

/// Decodes `records` as one batch of a [`MemoryStream`] through the public API.
pub fn decode(case: &DecodeCase, records: &[Option<Vec<u8>>], mode: ParseMode) -> Decoded {
    let batch = payloads(records);
    let stream = MemoryStream::with_schema(batch.schema());
    stream.add_batch(batch).unwrap();
    let mut d = Decode::new(stream, "value", case.format, case.fields.clone())
        .mode(mode)
        .keep(&["offset"]);
    let counter = d.malformed_counter();
    let result = d.get_batch(None, &Offset::from(0)).map(|parts| {
        assert_eq!(parts.len(), 1, "one input batch, one output batch");
        parts.into_iter().next().unwrap()
    });
    Decoded {
        result,
        malformed: counter.load(Ordering::Relaxed),
    }
}

/// Column `name` of `b`.
pub fn col<'a>(b: &'a RecordBatch, name: &str) -> &'a ArrayRef {
    b.column(b.schema().index_of(name).unwrap())
}

/// Row `i` of the decoded columns, as text (for comparisons).
pub fn decoded_row(b: &RecordBatch, fields: &[Field], i: usize) -> Vec<Option<String>> {
    fields
        .iter()
        .filter(|f| f.name != "_corrupt_record")
        .map(|f| {
            let c = col(b, &f.name);
            c.is_valid(i)
                .then(|| weir_engine::arrow::util::display::array_value_to_string(c, i).unwrap())
        })
        .collect()
}

/// The decoder properties every fuzz input must keep:
/// - no panic, and no failed batch in PERMISSIVE or DROPMALFORMED mode;
/// - PERMISSIVE: one output row per input record, in order, the malformed
///   ones (and only they) with their raw text in `_corrupt_record` and the
///   decoded columns null, a null payload a row of nulls and not malformed;
/// - whether a record is malformed, and what a well-formed one decodes to,
///   does not depend on the other records of the batch (each is decoded
///   alone and compared);
/// - DROPMALFORMED: exactly the PERMISSIVE rows whose record is not
///   malformed, with the same values;
/// - FAILFAST: fails exactly when some record is malformed;
/// - the malformed count is the number of malformed records;
/// - `oracle(record)`: `Some(true)` = must be malformed, `Some(false)` = must
///   be well-formed, `None` = no claim.
pub fn check_decoder(case: &DecodeCase, oracle: impl Fn(&[u8], &[Field]) -> Option<bool>) {
    let n = case.records.len();
    let corrupt = "_corrupt_record";

    let p = decode(case, &case.records, ParseMode::Permissive);
    let out = match p.result {
        Ok(b) => b,
        Err(e) => panic!("PERMISSIVE failed the batch: {e}"),
    };
    assert_eq!(out.num_rows(), n, "PERMISSIVE keeps one row per record");
    assert_eq!(
        int64s(&out, "offset"),
        (0..n as i64).collect::<Vec<_>>(),
        "PERMISSIVE keeps the records' order"
    );
    let raw = col(&out, corrupt).as_string::<i32>();
    let mut malformed = vec![false; n];
    for (i, r) in case.records.iter().enumerate() {
        let bad = raw.is_valid(i);
        malformed[i] = bad;
        let Some(r) = r else {
            assert!(!bad, "a null payload is not malformed");
            assert!(
                decoded_row(&out, &case.fields, i)
                    .iter()
                    .all(Option::is_none),
                "a null payload is a row of nulls"
            );
            continue;
        };
        let text = String::from_utf8_lossy(r);
        let alone = decode(
            case,
            std::slice::from_ref(&case.records[i]),
            ParseMode::Permissive,
        )
        .result
        .unwrap_or_else(|e| panic!("PERMISSIVE failed a batch of one record: {e}"));
        let alone_bad = col(&alone, corrupt).is_valid(0);
        assert_eq!(
            bad, alone_bad,
            "record {i} ({text:?}) is malformed in the batch: {bad}, alone: {alone_bad}"
        );
        if bad {
            assert_eq!(
                raw.value(i),
                text,
                "the raw text of a malformed record is kept"
            );
            assert!(
                decoded_row(&out, &case.fields, i)
                    .iter()
                    .all(Option::is_none),
                "a malformed record is a row of nulls"
            );
        } else {
            assert_eq!(
                decoded_row(&out, &case.fields, i),
                decoded_row(&alone, &case.fields, 0),
                "record {i} ({text:?}) decodes the same in the batch and alone"
            );
        }
        if let Some(want) = oracle(r, &case.fields) {
            assert_eq!(
                bad, want,
                "record {text:?}: malformed {bad}, the oracle says {want}"
            );
        }
    }
    let bad_count = malformed.iter().filter(|b| **b).count() as u64;
    assert_eq!(p.malformed, bad_count, "the malformed count");

    let d = decode(case, &case.records, ParseMode::DropMalformed);
    let dropped = match d.result {
        Ok(b) => b,
        Err(e) => panic!("DROPMALFORMED failed the batch: {e}"),
    };
    assert_eq!(d.malformed, bad_count, "both modes count the same records");
    let kept: Vec<usize> = (0..n).filter(|i| !malformed[*i]).collect();
    assert_eq!(
        int64s(&dropped, "offset"),
        kept.iter().map(|i| *i as i64).collect::<Vec<_>>(),
        "DROPMALFORMED drops exactly the malformed records and keeps the rest in order"
    );
    for (j, i) in kept.iter().enumerate() {
        assert_eq!(
            decoded_row(&dropped, &case.fields, j),
            decoded_row(&out, &case.fields, *i),
            "DROPMALFORMED keeps the same values"
        );
    }

    let f = decode(case, &case.records, ParseMode::FailFast);
    assert_eq!(
        f.result.is_err(),
        bad_count > 0,
        "FAILFAST fails exactly when a record is malformed"
    );
}

fn int64s(b: &RecordBatch, name: &str) -> Vec<i64> {
    col(b, name)
        .as_primitive::<weir_engine::arrow::datatypes::Int64Type>()
        .values()
        .to_vec()
}
