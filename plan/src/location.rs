//! Where a checkpoint, a file source or sink, or a table lives: a plain
//! local path, a `file:///` URL, or an `s3://bucket/prefix` URL (`s3a://` is
//! accepted too, as Spark users write it). One rule for both the
//! `stream_query!` macro (which refuses a malformed literal at compile time)
//! and the engine (which parses every location it opens).

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

/// What weir accepts as a location, for error messages.
pub const ACCEPTED_LOCATIONS: &str =
    "weir accepts a local path, file:///absolute/path or s3://bucket/prefix";

/// A parsed storage location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageLocation {
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

/// Why a location string was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocationError {
    shown: String,
    reason: String,
}

impl LocationError {
    /// The location as written, without any credentials it carried.
    pub fn location(&self) -> &str {
        &self.shown
    }

    /// What is wrong with it and how to write it instead.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for LocationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid storage location `{}`: {}. {ACCEPTED_LOCATIONS}",
            self.shown, self.reason
        )
    }
}

impl std::error::Error for LocationError {}

impl StorageLocation {
    /// Parses a location. A string without a `scheme://` is a local path;
    /// `file://` must name an absolute local path; `s3://` (or `s3a://`)
    /// must name a valid bucket. Anything else is refused with what is
    /// accepted.
    ///
    /// Credentials in the URL (Hadoop's `s3a://KEY:SECRET@bucket/path`) are
    /// refused, and never shown in the error: they belong in the settings.
    pub fn parse(location: &str) -> Result<StorageLocation, LocationError> {
        let (shown, credentials) = without_credentials(location);
        let bad = |reason: String| LocationError {
            shown: shown.to_string(),
            reason,
        };
        if location.trim().is_empty() {
            return Err(bad("it is empty".into()));
        }
        if credentials {
            return Err(bad(
                "it carries credentials (`user:password@`, not shown here), which weir refuses in a location: they would end up in logs and the UI. Remove them from the URL and set spark.hadoop.fs.s3a.access.key and spark.hadoop.fs.s3a.secret.key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) instead".into(),
            ));
        }
        let Some((scheme, rest)) = split_scheme(location) else {
            return Ok(StorageLocation::Local(PathBuf::from(location)));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                let path = match rest.strip_prefix("localhost") {
                    Some(p) if p.starts_with('/') => p,
                    _ => rest,
                };
                if !path.starts_with('/') {
                    return Err(bad(
                        "a file:// URL names an absolute local path, as in file:///tmp/chk (three slashes)".into(),
                    ));
                }
                if path.contains(['?', '#']) {
                    return Err(bad("a file:// URL has no query or fragment".into()));
                }
                Ok(StorageLocation::Local(PathBuf::from(
                    percent_decode(path).map_err(bad)?,
                )))
            }
            "s3" | "s3a" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("no bucket: write s3://bucket/prefix".into()));
                }
                check_bucket(bucket).map_err(bad)?;
                if prefix.contains(['?', '#']) {
                    return Err(bad("an S3 location has no query or fragment".into()));
                }
                let prefix = prefix.trim_end_matches('/');
                if !prefix.is_empty() {
                    for seg in prefix.split('/') {
                        if seg.is_empty() || seg == "." || seg == ".." {
                            return Err(bad(format!(
                                "the key prefix `{prefix}` has an empty, `.` or `..` segment"
                            )));
                        }
                    }
                }
                Ok(StorageLocation::S3 {
                    bucket: bucket.to_string(),
                    prefix: prefix.to_string(),
                })
            }
            other => Err(bad(format!("the scheme `{other}://` is not supported"))),
        }
    }

    /// True for a location on the local file system.
    pub fn is_local(&self) -> bool {
        matches!(self, StorageLocation::Local(_))
    }
}

impl fmt::Display for StorageLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageLocation::Local(p) => write!(f, "{}", p.display()),
            StorageLocation::S3 { bucket, prefix } if prefix.is_empty() => {
                write!(f, "s3://{bucket}")
            }
            StorageLocation::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// `scheme` and the rest after `scheme://`, when the string starts with a
/// URL scheme (a letter, then letters, digits, `+`, `-` or `.`).
fn split_scheme(s: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = s.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some((scheme, rest))
}

/// `location` without the `user:password@` part after its scheme (as in
/// Hadoop's `s3a://KEY:SECRET@bucket/path`), and whether it had one. A
/// secret may hold `/` or `@` (AWS secret keys hold `/`): a `:` before the
/// first `/` (no bucket name has one) starts credentials that run to the
/// next `@`; an `@` before the first `/` ends them at the last such `@`.
fn without_credentials(location: &str) -> (Cow<'_, str>, bool) {
    let Some((scheme, rest)) = split_scheme(location) else {
        return (location.into(), false);
    };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let at = if authority.contains('@') {
        authority.rfind('@')
    } else if authority.contains(':') {
        rest.find('@')
    } else {
        None
    };
    match at {
        Some(i) => (format!("{scheme}://{}", &rest[i + 1..]).into(), true),
        None => (location.into(), false),
    }
}

/// S3's bucket naming rules: 3 to 63 characters, lowercase letters, digits,
/// dots and hyphens, starting and ending with a letter or digit.
fn check_bucket(b: &str) -> Result<(), String> {
    let ok = (3..=63).contains(&b.len())
        && b.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
        && b.as_bytes()[0].is_ascii_alphanumeric()
        && b.as_bytes()[b.len() - 1].is_ascii_alphanumeric()
        && !b.contains("..");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{b}` is not a valid S3 bucket name (3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit)"
        ))
    }
}

/// Decodes `%XX` escapes of a `file://` URL's path.
fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("a bad %-escape at `{}`", &s[i..]))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the %-escapes do not decode to UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(bucket: &str, prefix: &str) -> StorageLocation {
        StorageLocation::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
        }
    }

    #[test]
    fn local_paths_file_urls_and_s3_urls_parse() {
        for (text, want) in [
            ("/tmp/chk", StorageLocation::Local("/tmp/chk".into())),
            ("chk/a", StorageLocation::Local("chk/a".into())),
            ("C:\\chk", StorageLocation::Local("C:\\chk".into())),
            ("file:///tmp/chk", StorageLocation::Local("/tmp/chk".into())),
            (
                "file://localhost/tmp/c",
                StorageLocation::Local("/tmp/c".into()),
            ),
            (
                "FILE:///tmp/a%20b",
                StorageLocation::Local("/tmp/a b".into()),
            ),
            ("s3://chk/page_views/", s3("chk", "page_views")),
            ("s3://chk", s3("chk", "")),
            ("s3://chk/", s3("chk", "")),
            ("S3://chk/p", s3("chk", "p")),
            ("s3a://my.bucket-1/a/b/c", s3("my.bucket-1", "a/b/c")),
        ] {
            assert_eq!(StorageLocation::parse(text).unwrap(), want, "{text}");
        }
        assert!(StorageLocation::parse("chk/a").unwrap().is_local());
        assert!(!StorageLocation::parse("s3://chk/a").unwrap().is_local());
        assert_eq!(s3("chk", "a/b").to_string(), "s3://chk/a/b");
        assert_eq!(s3("chk", "").to_string(), "s3://chk");
    }

    #[test]
    fn malformed_locations_are_clear_errors() {
        for (text, says) in [
            ("", "it is empty"),
            ("  ", "it is empty"),
            ("s3://", "no bucket: write s3://bucket/prefix"),
            ("s3:///prefix", "no bucket"),
            (
                "s3://My_Bucket/x",
                "`My_Bucket` is not a valid S3 bucket name",
            ),
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
            ("file:///tmp/%ff", "do not decode to UTF-8"),
            ("s3a://AKIAKEY:s3cr3t@chk/p", "carries credentials"),
        ] {
            let err = StorageLocation::parse(text).unwrap_err();
            assert!(err.reason().contains(says), "{text}: {err}");
            let shown = err.to_string();
            assert!(
                shown.starts_with("invalid storage location `"),
                "names the location: {shown}"
            );
            assert!(
                shown.ends_with(ACCEPTED_LOCATIONS),
                "says what is accepted: {shown}"
            );
        }
        assert_eq!(
            StorageLocation::parse("gs://bucket/x")
                .unwrap_err()
                .location(),
            "gs://bucket/x"
        );
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
            let err = StorageLocation::parse(text).unwrap_err();
            assert_eq!(err.location(), shown, "{text}");
            let msg = err.to_string();
            assert!(!msg.contains("s3cr"), "the secret is shown: {msg}");
            assert!(!msg.contains("AKIAKEY"), "the key is shown: {msg}");
            assert!(msg.contains(&format!("`{shown}`")), "{text}: {msg}");
            assert!(msg.contains("carries credentials"), "{msg}");
            assert!(msg.contains("spark.hadoop.fs.s3a.secret.key"), "{msg}");
        }
        // An `@` in the key prefix is no credential.
        assert_eq!(
            StorageLocation::parse("s3://chk/me@example.com/q1").unwrap(),
            s3("chk", "me@example.com/q1")
        );
    }
}
