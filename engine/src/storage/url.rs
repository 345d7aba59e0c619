//! Where a checkpoint, a file source or sink, or a table lives: a plain
//! local path, a `file:///` URL, or an `s3://bucket/prefix` URL (`s3a://` is
//! accepted too, as Spark users write it). The parsing rule lives in
//! `weir_plan::location`, shared with the `stream_query!` macro.

use std::fmt;
use std::path::PathBuf;

use weir_plan::StorageLocation;

use crate::error::{Result, WeirError};

/// A parsed storage location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A directory on the local file system (a plain path or `file:///...`).
    Local(PathBuf),
    /// A prefix in an S3 bucket.
    S3 {
        /// The bucket name.
        bucket: String,
        /// The key prefix, without leading or trailing `/` (empty: the
        /// bucket's root).
        prefix: String,
    },
}

impl Location {
    /// Parses a location. A string without a `scheme://` is a local path;
    /// `file://` must name an absolute local path; `s3://` (or `s3a://`)
    /// must name a valid bucket. Anything else is refused with what is
    /// accepted.
    ///
    /// Credentials in the URL (Hadoop's `s3a://KEY:SECRET@bucket/path`) are
    /// refused, and never shown in the error: they belong in the settings.
    /// The rule is [`weir_plan::StorageLocation::parse`], the one
    /// `stream_query!` checks its literal paths with at compile time.
    pub fn parse(location: &str) -> Result<Location> {
        match StorageLocation::parse(location) {
            Ok(StorageLocation::Local(path)) => Ok(Location::Local(path)),
            Ok(StorageLocation::S3 { bucket, prefix }) => Ok(Location::S3 { bucket, prefix }),
            Err(e) => Err(WeirError::Config(e.to_string())),
        }
    }

    /// True for a location on the local file system.
    pub fn is_local(&self) -> bool {
        matches!(self, Location::Local(_))
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            Location::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(bucket: &str, prefix: &str) -> Location {
        Location::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
        }
    }

    #[test]
    fn local_paths_file_urls_and_s3_urls_parse() {
        for (text, want) in [
            ("/tmp/chk", Location::Local("/tmp/chk".into())),
            ("chk/a", Location::Local("chk/a".into())),
            ("C:\\chk", Location::Local("C:\\chk".into())),
            ("file:///tmp/chk", Location::Local("/tmp/chk".into())),
            ("file://localhost/tmp/c", Location::Local("/tmp/c".into())),
            ("FILE:///tmp/a%20b", Location::Local("/tmp/a b".into())),
            ("s3://chk/page_views/", s3("chk", "page_views")),
            ("s3://chk", s3("chk", "")),
            ("s3://chk/", s3("chk", "")),
            ("s3a://my.bucket-1/a/b/c", s3("my.bucket-1", "a/b/c")),
        ] {
            assert_eq!(Location::parse(text).unwrap(), want, "{text}");
        }
        assert_eq!(s3("chk", "a/b").to_string(), "s3://chk/a/b");
        assert_eq!(s3("chk", "").to_string(), "s3://chk");
    }

    #[test]
    fn malformed_locations_are_clear_errors() {
        for (text, says) in [
            ("", "empty"),
            ("s3://", "no bucket"),
            ("s3:///prefix", "no bucket"),
            ("s3://My_Bucket/x", "not a valid S3 bucket name"),
            ("s3://ab/x", "not a valid S3 bucket name"),
            ("s3://-ab/x", "not a valid S3 bucket name"),
            ("s3://a..b/x", "not a valid S3 bucket name"),
            ("s3://bucket/a//b", "empty, `.` or `..` segment"),
            ("s3://bucket/a/../b", "empty, `.` or `..` segment"),
            ("s3://bucket/a?versionId=1", "no query"),
            ("gs://bucket/x", "the scheme `gs://` is not supported"),
            ("hdfs://nn/x", "the scheme `hdfs://` is not supported"),
            ("file://host/tmp", "absolute local path"),
            ("file://tmp", "absolute local path"),
            ("file:///tmp/%zz", "bad %-escape"),
            ("s3a://AKIAKEY:s3cr3t@chk/p", "carries credentials"),
        ] {
            let err = Location::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
            assert!(
                err.contains("s3://bucket/prefix"),
                "says what is accepted: {err}"
            );
        }
    }

    #[test]
    fn credentials_in_a_url_are_refused_and_never_shown() {
        for (text, shown) in [
            (
                "s3a://AKIAKEY:s3cr3t@chk/page_views",
                "s3a://chk/page_views",
            ),
            ("s3://AKIAKEY:s3cr3t@chk", "s3://chk"),
            // AWS secret keys may hold `/`, `+` and `@`.
            ("s3a://AKIAKEY:s3/cr+3t@chk/p", "s3a://chk/p"),
            ("s3a://AKIAKEY:s3cr@3t@chk/p", "s3a://chk/p"),
            ("s3://s3cr3t@chk/p", "s3://chk/p"),
            (
                "file://me:s3cr3t@localhost/tmp/chk",
                "file://localhost/tmp/chk",
            ),
        ] {
            let err = Location::parse(text).unwrap_err().to_string();
            assert!(!err.contains("s3cr"), "the secret is shown: {err}");
            assert!(!err.contains("AKIAKEY"), "the key is shown: {err}");
            assert!(err.contains(&format!("`{shown}`")), "{text}: {err}");
            assert!(err.contains("carries credentials"), "{err}");
            assert!(err.contains("spark.hadoop.fs.s3a.secret.key"), "{err}");
        }
        // An `@` in the key prefix is no credential.
        assert_eq!(
            Location::parse("s3://chk/me@example.com/q1").unwrap(),
            s3("chk", "me@example.com/q1")
        );
    }
}
