//! The object store backend (S3): each write is one whole-object PUT, which
//! S3 makes atomic; a create-once write is a conditional PUT
//! (`If-None-Match: *`, object_store's `PutMode::Create`), refused with 412
//! when the key exists, so no rename is ever needed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use object_store::aws::AmazonS3;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::config::{redact, S3Settings};
use super::{runtime, Created, Entry};
use crate::error::{Result, WeirError};

/// Requests this process made to object stores, by kind: PUT, GET, LIST, DELETE.
static REQUESTS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
const PUT: usize = 0;
const GET: usize = 1;
const LIST: usize = 2;
const DELETE: usize = 3;

fn count(kind: usize) {
    REQUESTS[kind].fetch_add(1, Ordering::Relaxed);
}

/// The requests this process has made to object stores so far (each
/// counted once, whatever the client's retries).
pub(crate) fn requests() -> super::Requests {
    let n = |k: usize| REQUESTS[k].load(Ordering::Relaxed);
    super::Requests {
        puts: n(PUT),
        gets: n(GET),
        lists: n(LIST),
        deletes: n(DELETE),
    }
}

/// A prefix in an S3 bucket.
#[derive(Clone)]
pub(crate) struct ObjectDir {
    store: Arc<AmazonS3>,
    bucket: String,
    /// Without leading or trailing `/`; empty: the bucket's root.
    pub(crate) prefix: String,
    endpoint: Option<String>,
    /// Credentials in effect, removed from every message.
    secrets: Arc<Vec<String>>,
}

impl std::fmt::Debug for ObjectDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectDir")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl ObjectDir {
    /// A client for `s3://bucket/prefix`; checks, with one listing request,
    /// that the bucket exists and answers.
    pub(crate) fn open(bucket: &str, prefix: &str, s3: &S3Settings) -> Result<ObjectDir> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let (builder, endpoint) = s3.builder(bucket, env.clone())?;
        let secrets = Arc::new(s3.secrets(env));
        let root = format!("s3://{bucket}/{prefix}");
        let store = runtime::entered(|| builder.build())
            .map_err(|e| WeirError::io(&root, std::io::Error::other(e)))?
            .map_err(|e| {
                WeirError::Config(format!(
                    "cannot set up the S3 client for {root}: {}",
                    redact(&e.to_string(), &secrets)
                ))
            })?;
        let dir = ObjectDir {
            store: Arc::new(store),
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            endpoint,
            secrets,
        };
        let store = dir.store.clone();
        let at = dir.key("")?;
        count(LIST);
        dir.call("", "listing", async move {
            store.list_with_delimiter(at.as_ref()).await.map(|_| ())
        })?;
        Ok(dir)
    }

    /// The endpoint in effect (None: AWS's, by region).
    pub(crate) fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// A directory below this one.
    pub(crate) fn child(&self, rel: &str) -> ObjectDir {
        let mut c = self.clone();
        c.prefix = join(&self.prefix, rel);
        c
    }

    /// `s3://bucket/prefix/rel`, for messages.
    pub(crate) fn display_path(&self, rel: &str) -> PathBuf {
        PathBuf::from(
            format!("s3://{}/{}", self.bucket, join(&self.prefix, rel)).trim_end_matches('/'),
        )
    }

    /// The object key of `rel`; None for the bucket's root.
    fn key(&self, rel: &str) -> Result<Option<ObjectPath>> {
        let k = join(&self.prefix, rel);
        if k.is_empty() {
            return Ok(None);
        }
        ObjectPath::parse(&k).map(Some).map_err(|e| {
            WeirError::Config(format!(
                "invalid object key `{k}` in s3://{}: {e}",
                self.bucket
            ))
        })
    }

    fn object_key(&self, rel: &str) -> Result<ObjectPath> {
        self.key(rel)?.ok_or_else(|| {
            WeirError::Config(format!("an object needs a name below s3://{}", self.bucket))
        })
    }

    /// Runs one request on the storage runtime, mapping its error to a
    /// clear, credential-free one.
    fn call<T: Send + 'static>(
        &self,
        rel: &str,
        what: &str,
        f: impl std::future::Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> Result<T> {
        match runtime::run(f) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(rel, what, e)),
            Err(e) => Err(self.runtime_err(rel, e)),
        }
    }

    /// The error for a request the storage runtime could not run.
    fn runtime_err(&self, rel: &str, e: String) -> WeirError {
        WeirError::io(self.display_path(rel), std::io::Error::other(e))
    }

    fn error(&self, rel: &str, what: &str, e: object_store::Error) -> WeirError {
        use std::io::ErrorKind;
        let text = redact(&e.to_string(), &self.secrets);
        let at = self
            .endpoint
            .as_ref()
            .map(|e| format!(" at {e}"))
            .unwrap_or_default();
        let (kind, msg) = match &e {
            e if is_missing_bucket(e) => (
                    ErrorKind::NotFound,
                    format!(
                        "the bucket `{}` does not exist{at}: create it (e.g. `aws s3 mb s3://{}`) or fix the location",
                        self.bucket, self.bucket
                    ),
            ),
            e if is_create_conflict(e) => (
                ErrorKind::Other,
                format!(
                    "{what} met another write of the same object in flight{at}, twice (S3's 409 ConditionalRequestConflict): is another run of the query writing this checkpoint? Stop it, then restart this one ({text})"
                ),
            ),
            object_store::Error::Unauthenticated { .. }
            | object_store::Error::PermissionDenied { .. } => (
                ErrorKind::PermissionDenied,
                format!(
                    "{what} was refused{at} ({text}): check the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or spark.hadoop.fs.s3a.access.key / secret.key) and the bucket's policy"
                ),
            ),
            _ => (ErrorKind::Other, format!("{what} failed{at}: {text}")),
        };
        WeirError::io(self.display_path(rel), std::io::Error::new(kind, msg))
    }

    /// Creates `rel` unless it exists (`If-None-Match: *`). S3 may answer
    /// 409 ConditionalRequestConflict while another conditional write of the
    /// same key is in flight (neither created nor refused yet): the PUT is
    /// tried once more, a moment later, and then gets a definite answer.
    pub(crate) fn put_create(&self, rel: &str, bytes: &[u8]) -> Result<Created> {
        let key = self.object_key(rel)?;
        let payload = PutPayload::from(bytes.to_vec());
        let mut conflicts = 0;
        loop {
            let (store, key, payload) = (self.store.clone(), key.clone(), payload.clone());
            count(PUT);
            let r = runtime::run(async move {
                store
                    .put_opts(&key, payload, PutOptions::from(PutMode::Create))
                    .await
            });
            return match r {
                Ok(Ok(_)) => Ok(Created::Created),
                Ok(Err(e)) if is_create_conflict(&e) && conflicts == 0 => {
                    conflicts += 1;
                    tracing::debug!(
                        object = %self.display_path(rel).display(),
                        "a conditional create met another write in flight (409); trying once more"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
                Ok(Err(e)) if is_create_conflict(&e) => {
                    Err(self.error(rel, "a conditional create", e))
                }
                Ok(Err(object_store::Error::AlreadyExists { .. })) => Ok(Created::Exists),
                Ok(Err(e)) => Err(self.error(rel, "a conditional create", e)),
                Err(e) => Err(self.runtime_err(rel, e)),
            };
        }
    }

    pub(crate) fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        let key = self.object_key(rel)?;
        let store = self.store.clone();
        let payload = PutPayload::from(bytes.to_vec());
        count(PUT);
        self.call(rel, "a write", async move {
            store.put(&key, payload).await.map(|_| ())
        })
    }

    pub(crate) fn get(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        let key = self.object_key(rel)?;
        let store = self.store.clone();
        count(GET);
        let r = runtime::run(async move {
            match store.get(&key).await {
                Ok(g) => g.bytes().await.map(|b| Some(b.to_vec())),
                Err(e) => Err(e),
            }
        });
        match r {
            Ok(Ok(v)) => Ok(v),
            // A missing bucket is an error, not an empty directory.
            Ok(Err(e @ object_store::Error::NotFound { .. })) if !is_missing_bucket(&e) => Ok(None),
            Ok(Err(e)) => Err(self.error(rel, "a read", e)),
            Err(e) => Err(self.runtime_err(rel, e)),
        }
    }

    pub(crate) fn list_entries(&self, rel_dir: &str) -> Result<Vec<Entry>> {
        Ok(self.list_level(rel_dir)?.0)
    }

    /// The objects directly under `rel_dir` (sorted) and the names of its
    /// "directories" (common prefixes), in one LIST.
    pub(crate) fn list_level(&self, rel_dir: &str) -> Result<(Vec<Entry>, Vec<String>)> {
        let at = self.key(rel_dir)?;
        let at_key = at.clone();
        let store = self.store.clone();
        count(LIST);
        let listed = self.call(rel_dir, "a listing", async move {
            store.list_with_delimiter(at.as_ref()).await
        })?;
        let mut out: Vec<Entry> = listed
            .objects
            .into_iter()
            // A "folder" marker (a zero-byte object named like the listed
            // prefix, as the S3 console and S3A make) is not an object in it.
            .filter(|m| Some(&m.location) != at_key.as_ref())
            .filter_map(|m| {
                Some(Entry {
                    name: m.location.filename()?.to_string(),
                    size: m.size,
                    modified_ms: m.last_modified.timestamp_millis(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        let dirs = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        Ok((out, dirs))
    }

    pub(crate) fn delete(&self, rel: &str) -> Result<()> {
        let key = self.object_key(rel)?;
        let store = self.store.clone();
        count(DELETE);
        match runtime::run(async move { store.delete(&key).await }) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e @ object_store::Error::NotFound { .. })) if !is_missing_bucket(&e) => Ok(()),
            Ok(Err(e)) => Err(self.error(rel, "a delete", e)),
            Err(e) => Err(self.runtime_err(rel, e)),
        }
    }
}

/// True when `e` says the bucket does not exist (S3's `NoSuchBucket`, as a
/// 404 or in an error body).
fn is_missing_bucket(e: &object_store::Error) -> bool {
    matches!(
        e,
        object_store::Error::NotFound { .. } | object_store::Error::Generic { .. }
    ) && e.to_string().contains("NoSuchBucket")
}

/// True when a conditional create was answered 409 (S3's
/// `ConditionalRequestConflict`: another conditional write of the key was
/// in flight). object_store reports a 409 as `AlreadyExists`, like the 412
/// that does mean the object exists; only the status tells them apart.
fn is_create_conflict(e: &object_store::Error) -> bool {
    let text = e.to_string();
    matches!(e, object_store::Error::AlreadyExists { .. })
        && (text.contains("409 Conflict") || text.contains("ConditionalRequestConflict"))
}

/// `a/b` from `a` and `b`, either possibly empty.
fn join(prefix: &str, rel: &str) -> String {
    match (prefix.is_empty(), rel.is_empty()) {
        (true, _) => rel.to_string(),
        (_, true) => prefix.to_string(),
        _ => format!("{prefix}/{rel}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::Mutex;

    /// A stand-in for S3 on 127.0.0.1 (one request per connection): a
    /// listing is answered empty, each PUT with the next `(status, error
    /// code)` of `puts`. Returns the settings that reach it and the PUTs'
    /// `If-None-Match` headers, in order.
    fn fake_s3(puts: Vec<(u16, &'static str)>) -> (S3Settings, Arc<Mutex<Vec<String>>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            let mut puts = puts.into_iter();
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                let (mut len, mut if_none_match) = (0usize, String::new());
                loop {
                    let mut h = String::new();
                    r.read_line(&mut h).unwrap();
                    let h = h.trim_end();
                    if h.is_empty() {
                        break;
                    }
                    let (k, v) = h.split_once(':').unwrap();
                    match k.to_ascii_lowercase().as_str() {
                        "content-length" => len = v.trim().parse().unwrap(),
                        "if-none-match" => if_none_match = v.trim().to_string(),
                        _ => {}
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                let (status, body) = if line.starts_with("PUT ") {
                    log.lock().unwrap().push(if_none_match);
                    match puts.next() {
                        Some((200, _)) | None => (200, String::new()),
                        Some((s, code)) => (
                            s,
                            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{code}</Message></Error>"),
                        ),
                    }
                } else {
                    (
                        200,
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>chk</Name><Prefix>q/</Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter><IsTruncated>false</IsTruncated></ListBucketResult>".to_string(),
                    )
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nETag: \"e1\"\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        let settings = S3Settings {
            endpoint: Some(format!("http://{addr}")),
            region: Some("us-east-1".into()),
            access_key_id: Some("test-key".into()),
            secret_access_key: Some("test-secret".into()),
            path_style_access: Some(true),
            allow_http: Some(true),
            ..S3Settings::default()
        };
        (settings, seen)
    }

    #[test]
    fn a_conditional_create_met_by_a_409_conflict_is_tried_once_more() {
        const CONFLICT: (u16, &str) = (409, "ConditionalRequestConflict");
        // 409, then created: Created (not "exists", which would refuse the
        // batch as another run's).
        let (s3, seen) = fake_s3(vec![CONFLICT, (200, "")]);
        let dir = ObjectDir::open("chk", "q", &s3).unwrap();
        assert_eq!(
            dir.put_create("offsets/0", b"v1").unwrap(),
            Created::Created
        );
        assert_eq!(*seen.lock().unwrap(), ["*", "*"], "two conditional PUTs");
        // 409, then 412: the other write won.
        let (s3, seen) = fake_s3(vec![CONFLICT, (412, "PreconditionFailed")]);
        let dir = ObjectDir::open("chk", "q", &s3).unwrap();
        assert_eq!(dir.put_create("offsets/0", b"v1").unwrap(), Created::Exists);
        assert_eq!(seen.lock().unwrap().len(), 2);
        // A 412 alone is not tried again.
        let (s3, seen) = fake_s3(vec![(412, "PreconditionFailed")]);
        let dir = ObjectDir::open("chk", "q", &s3).unwrap();
        assert_eq!(dir.put_create("offsets/0", b"v1").unwrap(), Created::Exists);
        assert_eq!(seen.lock().unwrap().len(), 1);
        // Two conflicts in a row: a clear error, tried no more.
        let (s3, seen) = fake_s3(vec![CONFLICT, CONFLICT, (200, "")]);
        let dir = ObjectDir::open("chk", "q", &s3).unwrap();
        let err = dir.put_create("offsets/0", b"v1").unwrap_err().to_string();
        assert!(err.contains("409 ConditionalRequestConflict"), "{err}");
        assert!(err.contains("another run of the query"), "{err}");
        assert!(err.contains("s3://chk/q/offsets/0"), "{err}");
        assert_eq!(seen.lock().unwrap().len(), 2);
    }
}
