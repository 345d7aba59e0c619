//! Where a checkpoint, a file source or sink, or a table lives: a plain
//! local path, a `file:///` URL, or an `s3://bucket/prefix` URL (`s3a://` is
//! accepted too, as Spark users write it). The rule is
//! [`weir_plan::StorageLocation::parse`], the one `stream_query!` checks its
//! literal paths with at compile time; the engine uses it as is.

/// A parsed storage location: [`weir_plan::StorageLocation`] (a local
/// directory, or a bucket and key prefix on S3).
pub use weir_plan::StorageLocation as Location;

impl From<weir_plan::LocationError> for crate::error::WeirError {
    fn from(e: weir_plan::LocationError) -> Self {
        crate::error::WeirError::Config(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Result, WeirError};

    /// A malformed location is a configuration error with the plan's words
    /// (the parsing cases themselves are tested in `weir_plan::location`).
    #[test]
    fn a_malformed_location_is_a_config_error_with_the_rules_message() {
        fn open(text: &str) -> Result<Location> {
            Ok(Location::parse(text)?)
        }
        let err = open("s3:///prefix").unwrap_err();
        assert!(
            matches!(&err, WeirError::Config(m) if m.contains("no bucket") && m.contains("s3://bucket/prefix")),
            "{err}"
        );
        assert_eq!(
            open("s3://chk/a/").unwrap().to_string(),
            "s3://chk/a",
            "the prefix is kept without its trailing `/`"
        );
    }
}
