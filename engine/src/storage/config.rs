//! S3 settings, the way AWS and Spark users give them: the standard `AWS_*`
//! environment variables, overridden by session settings under Spark's
//! Hadoop S3A names.
//!
//! | session setting                                | environment             | meaning |
//! |------------------------------------------------|-------------------------|---------|
//! | `spark.hadoop.fs.s3a.endpoint`                 | `AWS_ENDPOINT_URL`      | the S3 endpoint (default AWS's, by region) |
//! | `spark.hadoop.fs.s3a.endpoint.region`          | `AWS_REGION`            | the region (default us-east-1) |
//! | `spark.hadoop.fs.s3a.access.key`               | `AWS_ACCESS_KEY_ID`     | the access key id |
//! | `spark.hadoop.fs.s3a.secret.key`               | `AWS_SECRET_ACCESS_KEY` | the secret key |
//! | `spark.hadoop.fs.s3a.session.token`            | `AWS_SESSION_TOKEN`     | a temporary session token |
//! | `spark.hadoop.fs.s3a.path.style.access`        | `AWS_VIRTUAL_HOSTED_STYLE_REQUEST` (inverse) | path-style URLs (default true: `endpoint/bucket/key`) |
//! | `weir.s3.allowHttp`, or `spark.hadoop.fs.s3a.connection.ssl.enabled=false` | `AWS_ALLOW_HTTP` | allow a plain-HTTP endpoint (local test servers) |
//!
//! Without keys, the usual AWS chain applies (web identity, ECS/EKS container
//! credentials, instance metadata). Credentials never appear in `Debug`
//! output or in the errors weir reports.

use std::fmt;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::ClientConfigKey;

use crate::error::{Result, WeirError};

/// The session settings [`S3Settings::set`] accepts, with what each means.
pub const S3_SETTINGS: &[(&str, &str)] = &[
    (
        "spark.hadoop.fs.s3a.endpoint",
        "the S3 endpoint URL (AWS_ENDPOINT_URL)",
    ),
    (
        "spark.hadoop.fs.s3a.endpoint.region",
        "the region (AWS_REGION)",
    ),
    (
        "spark.hadoop.fs.s3a.access.key",
        "the access key id (AWS_ACCESS_KEY_ID)",
    ),
    (
        "spark.hadoop.fs.s3a.secret.key",
        "the secret key (AWS_SECRET_ACCESS_KEY)",
    ),
    (
        "spark.hadoop.fs.s3a.session.token",
        "a session token (AWS_SESSION_TOKEN)",
    ),
    (
        "spark.hadoop.fs.s3a.path.style.access",
        "path-style requests, true or false (default true)",
    ),
    (
        "spark.hadoop.fs.s3a.connection.ssl.enabled",
        "false allows a plain-HTTP endpoint",
    ),
    (
        "weir.s3.allowHttp",
        "true allows a plain-HTTP endpoint (AWS_ALLOW_HTTP)",
    ),
];

/// S3 settings given in the session; each unset one falls back to the
/// environment (`AWS_*`), then to the AWS default.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Settings {
    /// `spark.hadoop.fs.s3a.endpoint`.
    pub endpoint: Option<String>,
    /// `spark.hadoop.fs.s3a.endpoint.region`.
    pub region: Option<String>,
    /// `spark.hadoop.fs.s3a.access.key`.
    pub access_key_id: Option<String>,
    /// `spark.hadoop.fs.s3a.secret.key`.
    pub secret_access_key: Option<String>,
    /// `spark.hadoop.fs.s3a.session.token`.
    pub session_token: Option<String>,
    /// `spark.hadoop.fs.s3a.path.style.access`.
    pub path_style_access: Option<bool>,
    /// `weir.s3.allowHttp` (or `spark.hadoop.fs.s3a.connection.ssl.enabled` = false).
    pub allow_http: Option<bool>,
}

impl fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &hidden(&self.access_key_id))
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("path_style_access", &self.path_style_access)
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

impl S3Settings {
    /// Sets one setting by its session key (see [`S3_SETTINGS`]). `Ok(false)`:
    /// the key is not an S3 setting; a bad value is an error.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool> {
        let flag = || match value.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(WeirError::Config(format!(
                "invalid value `{value}` for `{key}`: true or false"
            ))),
        };
        let text = || Some(value.trim().to_string()).filter(|v| !v.is_empty());
        match key {
            "spark.hadoop.fs.s3a.endpoint" => self.endpoint = text(),
            "spark.hadoop.fs.s3a.endpoint.region" => self.region = text(),
            "spark.hadoop.fs.s3a.access.key" => self.access_key_id = text(),
            "spark.hadoop.fs.s3a.secret.key" => self.secret_access_key = text(),
            "spark.hadoop.fs.s3a.session.token" => self.session_token = text(),
            "spark.hadoop.fs.s3a.path.style.access" => self.path_style_access = Some(flag()?),
            "spark.hadoop.fs.s3a.connection.ssl.enabled" => self.allow_http = Some(!flag()?),
            "weir.s3.allowHttp" => self.allow_http = Some(flag()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The S3 client builder for `bucket`: `env` (the process environment's
    /// `AWS_*` variables, as `AmazonS3Builder::from_env` reads them), then
    /// these settings over it. Also returns the endpoint in effect, for
    /// messages. A plain-HTTP endpoint without allowHttp is refused here
    /// rather than at the first request.
    pub(crate) fn builder(
        &self,
        bucket: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(AmazonS3Builder, Option<String>)> {
        let mut b = AmazonS3Builder::new();
        for (k, v) in env {
            if k.starts_with("AWS_") {
                if let Ok(key) = k.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                    b = b.with_config(key, v);
                }
            }
        }
        b = b.with_bucket_name(bucket);
        if let Some(h) = self.allow_http {
            b = b.with_allow_http(h);
        }
        let allow_http = b
            .get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if let Some(e) = &self.endpoint {
            // Hadoop's fs.s3a.endpoint may omit the scheme.
            let e = if e.contains("://") {
                e.clone()
            } else if allow_http {
                format!("http://{e}")
            } else {
                format!("https://{e}")
            };
            b = b
                .with_config(AmazonS3ConfigKey::Endpoint, e.clone())
                .with_config(AmazonS3ConfigKey::S3Endpoint, e);
        }
        if let Some(r) = &self.region {
            b = b.with_region(r);
        }
        if let Some(k) = &self.access_key_id {
            b = b.with_access_key_id(k);
        }
        if let Some(k) = &self.secret_access_key {
            b = b.with_secret_access_key(k);
        }
        if let Some(t) = &self.session_token {
            b = b.with_token(t);
        }
        if let Some(p) = self.path_style_access {
            b = b.with_virtual_hosted_style_request(!p);
        }
        let endpoint = b
            .get_config_value(&AmazonS3ConfigKey::S3Endpoint)
            .or_else(|| b.get_config_value(&AmazonS3ConfigKey::Endpoint));
        if let Some(e) = &endpoint {
            if e.to_ascii_lowercase().starts_with("http://") && !allow_http {
                return Err(WeirError::Config(format!(
                    "the S3 endpoint {e} is plain HTTP: allow it with AWS_ALLOW_HTTP=true or the session setting weir.s3.allowHttp=true (for a local test server), or use an https:// endpoint"
                )));
            }
        }
        Ok((b, endpoint))
    }

    /// The secrets in effect (these settings' and `env`'s), for [`redact`].
    pub(crate) fn secrets(&self, env: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
        let mut s: Vec<String> = [
            &self.access_key_id,
            &self.secret_access_key,
            &self.session_token,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
        for (k, v) in env {
            if matches!(
                k.as_str(),
                "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" | "AWS_SESSION_TOKEN"
            ) {
                s.push(v);
            }
        }
        s
    }
}

/// `text` with every secret of 8 characters or more replaced by `***`
/// (shorter values, such as a test server's `test`, would mangle ordinary
/// words and are no real credentials).
pub(crate) fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if s.len() >= 8 {
            out = out.replace(s.as_str(), "***");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn value(b: &AmazonS3Builder, k: AmazonS3ConfigKey) -> Option<String> {
        b.get_config_value(&k)
    }

    #[test]
    fn the_environment_applies_and_session_settings_override_it() {
        let e = env(&[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
            ("AWS_ACCESS_KEY_ID", "env-key-id"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ALLOW_HTTP", "true"),
            ("HOME", "/root"),
        ]);
        let (b, endpoint) = S3Settings::default().builder("bkt", e.clone()).unwrap();
        assert_eq!(endpoint.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(
            value(&b, AmazonS3ConfigKey::AccessKeyId).as_deref(),
            Some("env-key-id")
        );
        assert_eq!(
            value(&b, AmazonS3ConfigKey::Region).as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(value(&b, AmazonS3ConfigKey::Bucket).as_deref(), Some("bkt"));

        let mut s = S3Settings::default();
        for (k, v) in [
            ("spark.hadoop.fs.s3a.endpoint", "127.0.0.1:2"),
            ("spark.hadoop.fs.s3a.access.key", "conf-key-id"),
            ("spark.hadoop.fs.s3a.secret.key", "conf-secret"),
            ("spark.hadoop.fs.s3a.endpoint.region", "us-west-2"),
            ("spark.hadoop.fs.s3a.path.style.access", "false"),
        ] {
            assert!(s.set(k, v).unwrap(), "{k}");
        }
        let (b, endpoint) = s.builder("bkt", e).unwrap();
        // No scheme, HTTP allowed (by the environment): http://.
        assert_eq!(endpoint.as_deref(), Some("http://127.0.0.1:2"));
        assert_eq!(
            value(&b, AmazonS3ConfigKey::AccessKeyId).as_deref(),
            Some("conf-key-id")
        );
        assert_eq!(
            value(&b, AmazonS3ConfigKey::SecretAccessKey).as_deref(),
            Some("conf-secret")
        );
        assert_eq!(
            value(&b, AmazonS3ConfigKey::Region).as_deref(),
            Some("us-west-2")
        );
        assert_eq!(
            value(&b, AmazonS3ConfigKey::VirtualHostedStyleRequest).as_deref(),
            Some("true")
        );
    }

    #[test]
    fn settings_keys_and_values_are_checked() {
        let mut s = S3Settings::default();
        assert!(!s.set("spark.sql.shuffle.partitions", "4").unwrap());
        let err = s.set("weir.s3.allowHttp", "yes").unwrap_err().to_string();
        assert!(err.contains("true or false"), "{err}");
        assert!(s
            .set("spark.hadoop.fs.s3a.connection.ssl.enabled", "false")
            .unwrap());
        assert_eq!(s.allow_http, Some(true));
        assert!(s.set("weir.s3.allowHttp", "FALSE").unwrap());
        assert_eq!(s.allow_http, Some(false));
        for (k, _) in S3_SETTINGS {
            let v = if k.contains("style") || k.contains("ssl") || k.contains("Http") {
                "true"
            } else {
                "x"
            };
            assert!(s.set(k, v).unwrap(), "{k} is accepted");
        }
    }

    #[test]
    fn a_plain_http_endpoint_needs_allow_http() {
        let mut s = S3Settings::default();
        s.set("spark.hadoop.fs.s3a.endpoint", "http://127.0.0.1:39900")
            .unwrap();
        let err = s.builder("bkt", env(&[])).unwrap_err().to_string();
        assert!(err.contains("AWS_ALLOW_HTTP=true"), "{err}");
        assert!(err.contains("weir.s3.allowHttp"), "{err}");
        let (_, e) = s
            .builder("bkt", env(&[("AWS_ALLOW_HTTP", "true")]))
            .unwrap();
        assert_eq!(e.as_deref(), Some("http://127.0.0.1:39900"));
        // Without a scheme and without allowHttp: https.
        let mut s = S3Settings::default();
        s.set("spark.hadoop.fs.s3a.endpoint", "minio.internal:9000")
            .unwrap();
        let (_, e) = s.builder("bkt", env(&[])).unwrap();
        assert_eq!(e.as_deref(), Some("https://minio.internal:9000"));
    }

    #[test]
    fn credentials_never_show_in_debug_or_messages() {
        let mut s = S3Settings::default();
        s.set("spark.hadoop.fs.s3a.access.key", KEY_ID).unwrap();
        s.set("spark.hadoop.fs.s3a.secret.key", SECRET).unwrap();
        s.set("spark.hadoop.fs.s3a.session.token", "token-token-token")
            .unwrap();
        let dbg = format!("{s:?} {s:#?}");
        for secret in [KEY_ID, SECRET, "token-token-token"] {
            assert!(!dbg.contains(secret), "{dbg}");
        }
        assert!(dbg.contains("<redacted>"), "{dbg}");
        let env_secret = "env-secret-value-123";
        let secrets = s.secrets(env(&[("AWS_SECRET_ACCESS_KEY", env_secret)]));
        let msg = format!("signing with {KEY_ID}:{SECRET} failed ({env_secret}); latest test");
        let red = redact(&msg, &secrets);
        for secret in [KEY_ID, SECRET, env_secret] {
            assert!(!red.contains(secret), "{red}");
        }
        assert!(
            red.contains("latest test"),
            "ordinary words are kept: {red}"
        );
    }
}
