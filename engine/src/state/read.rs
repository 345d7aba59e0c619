//! Reading a query's state, as Spark's state data source does
//! (`spark.read.format("statestore")` and `format("state-metadata")`): the
//! state of any stateful operator of a checkpoint (aggregation,
//! deduplication, session windows, each side of a stream-stream join) at
//! any retained batch, as Arrow record batches with Spark's columns (`key`
//! struct, `value` struct, `partition_id`), and as a DataFusion
//! [`TableProvider`] to query with SQL.
//!
//! Nothing is written: the checkpoint may be in use by a running query. The
//! operators are rebuilt from the plan the checkpoint's `metadata` records
//! (its sources' schemas included), and each decodes its own entries
//! ([`StatefulOperator::decode_state`]); the entries of a batch are what its
//! state version holds in `state/<operator>/<partition>/` (`left/` and
//! `right/` for a join), read as a restart reads them, for a local, a
//! `file://` or an `s3://` checkpoint.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int32Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;

use crate::checkpoint::{parse_batch_id, CheckpointMetadata};
use crate::error::{Result, WeirError};
use crate::ops::operator::{stateful_operators, DecodedState, StatefulOperator};
use crate::ops::Pipeline;
use crate::row::arrow_schema;
use crate::storage::{S3Settings, Storage};
use crate::table::StaticTable;

use super::files::VersionFiles;

/// The name Spark gives an operator's one store; weir's stores of
/// single-store operators have no name of their own (`""`).
pub const DEFAULT_STORE: &str = "default";

/// A checkpoint's stateful operators and how their state is laid out
/// (Spark's `state-metadata` source).
#[derive(Debug, Clone)]
pub struct StateMetadata {
    /// The query's id (stable across restarts).
    pub query_id: String,
    /// State partitions of every operator (`spark.sql.shuffle.partitions`
    /// when the checkpoint was created).
    pub partitions: usize,
    /// The latest committed batch, if any.
    pub latest_batch_id: Option<i64>,
    /// The stateful operators, by id.
    pub operators: Vec<OperatorMetadata>,
}

/// One stateful operator of a checkpoint.
#[derive(Debug, Clone)]
pub struct OperatorMetadata {
    /// Its id: `operatorId`, its directory under `state/`.
    pub id: usize,
    /// Spark's name for it (`stateStoreSave`, `dedupe`,
    /// `sessionWindowStateStoreSaveExec`, `symmetricHashJoin`).
    pub name: String,
    /// Its stores in each partition: `default`, or `left` and `right`.
    pub stores: Vec<StoreMetadata>,
    /// The oldest batch whose state is still kept (None: none yet).
    pub min_batch_id: Option<i64>,
    /// The newest batch whose state can be read (the latest committed).
    pub max_batch_id: Option<i64>,
}

/// One store of an operator: its name and the types of its keys and values.
#[derive(Debug, Clone)]
pub struct StoreMetadata {
    /// `default`, `left` or `right` (Spark's `storeName` / `joinSide`).
    pub name: String,
    /// The fields of the `key` column.
    pub key_schema: SchemaRef,
    /// The fields of the `value` column.
    pub value_schema: SchemaRef,
}

/// One store's entries at a batch: rows of `key`, `value`, `partition_id`.
#[derive(Debug, Clone)]
pub struct StoreState {
    /// The store's name (`default`, `left`, `right`).
    pub name: String,
    /// `key: struct`, `value: struct`, `partition_id: int`.
    pub schema: SchemaRef,
    /// One record batch per partition that has entries, in partition order.
    pub batches: Vec<RecordBatch>,
}

impl StoreState {
    /// Its number of entries.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// Its rows as a DataFusion table.
    pub fn into_table(self) -> Result<Arc<dyn TableProvider>> {
        Ok(Arc::new(MemTable::try_new(
            self.schema,
            vec![self.batches],
        )?))
    }
}

/// An operator's state at one batch, as [`read`] returns it.
#[derive(Debug, Clone)]
pub struct StateSnapshot {
    /// The operator.
    pub operator: OperatorMetadata,
    /// The batch whose state this is (the state after that batch).
    pub batch_id: i64,
    /// The stores read (the one chosen, or all of the operator's).
    pub stores: Vec<StoreState>,
}

impl StateSnapshot {
    /// The number of entries over the stores read (for a join read whole:
    /// both sides, as `numRowsTotal` counts them).
    pub fn num_rows(&self) -> usize {
        self.stores.iter().map(StoreState::num_rows).sum()
    }

    /// The store named `name` (`default`, `left`, `right`), if it was read.
    pub fn store(&self, name: &str) -> Option<&StoreState> {
        self.stores.iter().find(|s| s.name == name)
    }

    /// The one store read, or an error naming the choice to make.
    fn only(&self) -> Result<&StoreState> {
        match self.stores.as_slice() {
            [one] => Ok(one),
            _ => Err(WeirError::Config(format!(
                "operator {} ({}) keeps {} stores ({}); read one with StateReader::store_name (Spark's joinSide), or use StateSnapshot::store",
                self.operator.id,
                self.operator.name,
                self.stores.len(),
                store_list(&self.operator)
            ))),
        }
    }

    /// The rows of the one store read (all but a join's; a join's side
    /// when one was chosen).
    pub fn batches(&self) -> Result<&[RecordBatch]> {
        Ok(&self.only()?.batches)
    }

    /// The one store read as a DataFusion table.
    pub fn into_table(self) -> Result<Arc<dyn TableProvider>> {
        self.only()?;
        self.stores
            .into_iter()
            .next()
            .expect("one store")
            .into_table()
    }

    /// Runs a SQL query over the state: the table is `state` when one store
    /// was read, else one table per store, `state_left` and `state_right`.
    /// E.g. `SELECT key.word, value.count FROM state ORDER BY 2 DESC`.
    pub fn sql(&self, query: &str) -> Result<Vec<RecordBatch>> {
        let ctx = datafusion::prelude::SessionContext::new();
        let one = self.stores.len() == 1;
        for s in &self.stores {
            let name = if one {
                "state".to_string()
            } else {
                format!("state_{}", s.name)
            };
            ctx.register_table(name.as_str(), s.clone().into_table()?)?;
        }
        let query = query.to_string();
        // DataFusion is async: its own runtime, on a thread of its own (so
        // this works from inside another runtime too).
        std::thread::scope(|sc| {
            sc.spawn(move || -> Result<Vec<RecordBatch>> {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .map_err(|e| {
                        WeirError::Config(format!("cannot start a runtime for the query: {e}"))
                    })?;
                rt.block_on(async move { Ok(ctx.sql(&query).await?.collect().await?) })
            })
            .join()
            .map_err(|_| WeirError::Config("the state query panicked".into()))?
        })
    }
}

/// Reads state, with Spark's options: `path` ([`StateReader::new`]),
/// `operatorId`, `batchId`, `storeName` / `joinSide`.
#[derive(Debug, Clone)]
pub struct StateReader {
    location: String,
    operator: usize,
    batch_id: Option<i64>,
    store: Option<String>,
    s3: S3Settings,
}

impl StateReader {
    /// A reader of the checkpoint at `location` (a local path, `file://` or
    /// `s3://bucket/prefix`; S3 settings from the environment unless
    /// [`StateReader::s3`] gives them): operator 0, the latest committed
    /// batch, every store.
    pub fn new(location: impl Into<String>) -> StateReader {
        StateReader {
            location: location.into(),
            operator: 0,
            batch_id: None,
            store: None,
            s3: S3Settings::default(),
        }
    }

    /// The operator to read (`operatorId`; see [`StateReader::metadata`]).
    pub fn operator(mut self, id: usize) -> StateReader {
        self.operator = id;
        self
    }

    /// The batch whose state to read (`batchId`; default: the latest
    /// committed).
    pub fn batch_id(mut self, id: i64) -> StateReader {
        self.batch_id = Some(id);
        self
    }

    /// The store to read (`storeName`, or a join's `joinSide`: `left`,
    /// `right`; `default` for other operators). Default: all.
    pub fn store_name(mut self, name: impl Into<String>) -> StateReader {
        self.store = Some(name.into());
        self
    }

    /// S3 settings for an `s3://` checkpoint (Spark's `fs.s3a.*` names: see
    /// [`S3Settings`]).
    pub fn s3(mut self, s3: S3Settings) -> StateReader {
        self.s3 = s3;
        self
    }

    /// The checkpoint's operators, partitions and store schemas.
    pub fn metadata(&self) -> Result<StateMetadata> {
        Opened::open(&self.location, &self.s3)?.metadata()
    }

    /// The chosen operator's state at the chosen batch.
    pub fn read(&self) -> Result<StateSnapshot> {
        let opened = Opened::open(&self.location, &self.s3)?;
        let ops = stateful_operators(&opened.pipeline);
        let op = *ops.get(self.operator).ok_or_else(|| {
            let known: Vec<String> = ops
                .iter()
                .map(|o| format!("{} ({})", o.id(), o.metrics().operator_name))
                .collect();
            WeirError::Config(if known.is_empty() {
                format!(
                    "operator {} does not exist: the query of checkpoint {} keeps no state",
                    self.operator, self.location
                )
            } else {
                format!(
                    "operator {} does not exist: the stateful operators of this query are {}",
                    self.operator,
                    known.join(", ")
                )
            })
        })?;
        let meta = opened.operator_metadata(op)?;
        let stores: Vec<&str> = match &self.store {
            None => op.store_names().to_vec(),
            Some(s) => {
                let internal = if s == DEFAULT_STORE { "" } else { s.as_str() };
                match op.store_names().iter().find(|n| **n == internal) {
                    Some(n) => vec![*n],
                    None => {
                        return Err(WeirError::Config(format!(
                            "operator {} ({}) has no store named \"{s}\": its stores are {}",
                            meta.id,
                            meta.name,
                            store_list(&meta)
                        )))
                    }
                }
            }
        };
        let latest = opened.latest_batch()?.ok_or_else(|| {
            WeirError::checkpoint(
                opened.storage.display_path("commits"),
                "no batch of this query has committed yet, so it has no state to read",
            )
        })?;
        let batch = self.batch_id.unwrap_or(latest);
        if batch < 0 || batch > latest {
            return Err(WeirError::checkpoint(
                opened.storage.display_path("commits"),
                format!(
                    "batch {batch} has not committed: the latest committed batch is {latest}; read that one or an earlier one"
                ),
            ));
        }
        if let Some(min) = meta.min_batch_id.filter(|m| batch < *m) {
            return Err(WeirError::checkpoint(
                opened.storage.display_path(&format!("state/{}", meta.id)),
                format!(
                    "the state of batch {batch} is no longer retained: the oldest batch whose state is kept is {min} (spark.sql.streaming.minBatchesToRetain sets how many are kept)"
                ),
            ));
        }
        let stores = stores
            .into_iter()
            .map(|name| opened.read_store(op, name, batch))
            .collect::<Result<Vec<_>>>()?;
        Ok(StateSnapshot {
            operator: meta,
            batch_id: batch,
            stores,
        })
    }
}

/// The state of operator `operator_id` of the checkpoint at `location` after
/// batch `batch_id` (None: the latest committed), every store of it (both
/// sides of a join). S3 settings come from the environment; see
/// [`StateReader`] for the other options.
pub fn read(location: &str, operator_id: usize, batch_id: Option<i64>) -> Result<StateSnapshot> {
    let mut r = StateReader::new(location).operator(operator_id);
    if let Some(b) = batch_id {
        r = r.batch_id(b);
    }
    r.read()
}

/// The stateful operators of the checkpoint at `location`, its partition
/// count, and each store's key and value schemas.
pub fn read_metadata(location: &str) -> Result<StateMetadata> {
    StateReader::new(location).metadata()
}

/// [`read`] as a DataFusion table (one store: not a join read whole).
pub fn table(
    location: &str,
    operator_id: usize,
    batch_id: Option<i64>,
) -> Result<Arc<dyn TableProvider>> {
    read(location, operator_id, batch_id)?.into_table()
}

/// `"default"`, `"left", "right"`.
fn store_list(op: &OperatorMetadata) -> String {
    op.stores
        .iter()
        .map(|s| format!("\"{}\"", s.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The name a user sees for an internal store name.
fn shown(store: &str) -> &str {
    if store.is_empty() {
        DEFAULT_STORE
    } else {
        store
    }
}

/// A checkpoint opened for reading, with its query's operators rebuilt.
struct Opened {
    storage: Storage,
    meta: CheckpointMetadata,
    pipeline: Pipeline,
}

impl Opened {
    fn open(location: &str, s3: &S3Settings) -> Result<Opened> {
        let storage = Storage::open(location, s3, false)?;
        let path = storage.display_path("metadata");
        let bytes = storage.get("metadata")?.ok_or_else(|| {
            WeirError::checkpoint(
                &path,
                "not a query checkpoint (it has no metadata file): give the checkpoint location the query was started with",
            )
        })?;
        let meta: CheckpointMetadata = serde_json::from_slice(&bytes).map_err(|e| {
            WeirError::checkpoint(
                &path,
                format!("the metadata file is damaged ({e}); restore it from a backup"),
            )
        })?;
        let plan = meta.plan.clone().ok_or_else(|| {
            WeirError::checkpoint(
                &path,
                "the metadata file records no plan (the checkpoint was written by an older weir), so its state cannot be decoded; run the query once with this weir to record it",
            )
        })?;
        let schemas: Vec<SchemaRef> = plan
            .sources
            .values()
            .map(|s| arrow_schema(&s.schema))
            .collect();
        // A static table's rows do not shape any state: its schema will do.
        let statics: BTreeMap<String, StaticTable> = plan
            .statics
            .iter()
            .map(|(n, s)| {
                (
                    n.clone(),
                    StaticTable::from_batches(arrow_schema(&s.schema), vec![]),
                )
            })
            .collect();
        let pipeline = Pipeline::compile(&plan, &schemas, &statics)?;
        Ok(Opened {
            storage,
            meta,
            pipeline,
        })
    }

    /// The latest committed batch.
    fn latest_batch(&self) -> Result<Option<i64>> {
        Ok(self
            .storage
            .list("commits")?
            .iter()
            .filter_map(|n| parse_batch_id(n))
            .max())
    }

    fn partitions(&self) -> usize {
        self.meta.state_partitions.max(1)
    }

    /// The directory of one store of one partition.
    fn store_dir(&self, op: usize, partition: usize, store: &str) -> Result<Storage> {
        let dir = self.storage.child(&format!("state/{op}/{partition}"))?;
        if store.is_empty() {
            Ok(dir)
        } else {
            dir.child(store)
        }
    }

    /// The oldest batch whose state is kept: the oldest snapshot's version
    /// (or version 1, when its delta is still there) less one, as listed in
    /// the first partition (all partitions are purged alike).
    fn min_batch(&self, op: &dyn StatefulOperator) -> Result<Option<i64>> {
        let store = op.store_names().first().copied().unwrap_or("");
        let names = self.store_dir(op.id(), 0, store)?.list("")?;
        let oldest = names
            .iter()
            .filter_map(|n| match n.split_once('.') {
                Some((v, "snapshot")) => v.parse::<u64>().ok(),
                Some(("1", "delta")) => Some(1),
                _ => None,
            })
            .min();
        Ok(oldest.map(|v| v as i64 - 1))
    }

    fn operator_metadata(&self, op: &dyn StatefulOperator) -> Result<OperatorMetadata> {
        let stores = op
            .store_names()
            .iter()
            .map(|name| {
                let empty = op.decode_state(name, &[])?;
                Ok(StoreMetadata {
                    name: shown(name).to_string(),
                    key_schema: struct_schema(&empty.key.data_type().clone()),
                    value_schema: struct_schema(&empty.value.data_type().clone()),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let max = self.latest_batch()?;
        Ok(OperatorMetadata {
            id: op.id(),
            name: op.metrics().operator_name,
            stores,
            min_batch_id: max.and(self.min_batch(op)?),
            max_batch_id: max,
        })
    }

    fn metadata(&self) -> Result<StateMetadata> {
        Ok(StateMetadata {
            query_id: self.meta.id.clone(),
            partitions: self.partitions(),
            latest_batch_id: self.latest_batch()?,
            operators: stateful_operators(&self.pipeline)
                .into_iter()
                .map(|op| self.operator_metadata(op))
                .collect::<Result<Vec<_>>>()?,
        })
    }

    /// Store `store` of `op` after batch `batch` (state version
    /// `batch + 1`), every partition.
    fn read_store(&self, op: &dyn StatefulOperator, store: &str, batch: i64) -> Result<StoreState> {
        let version = batch as u64 + 1;
        let empty = op.decode_state(store, &[])?;
        let schema = Arc::new(Schema::new(vec![
            Field::new("key", empty.key.data_type().clone(), false),
            Field::new("value", empty.value.data_type().clone(), false),
            Field::new("partition_id", DataType::Int32, false),
        ]));
        let mut batches = Vec::new();
        for p in 0..self.partitions() {
            let mut entries: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            // Read only: the files of that version, as a restart reads them.
            VersionFiles::new(self.store_dir(op.id(), p, store)?, version, 1).restore(
                version,
                |k, v| {
                    match v {
                        Some(v) => entries.insert(k, v),
                        None => entries.remove(&k),
                    };
                    Ok(())
                },
            )?;
            if entries.is_empty() {
                continue;
            }
            let pairs: Vec<(&[u8], &[u8])> = entries
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            let DecodedState { key, value } = op.decode_state(store, &pairs)?;
            let partition: ArrayRef = Arc::new(Int32Array::from(vec![p as i32; pairs.len()]));
            batches.push(RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(key), Arc::new(value), partition],
            )?);
        }
        Ok(StoreState {
            name: shown(store).to_string(),
            schema,
            batches,
        })
    }
}

/// The fields of a struct type as a schema.
fn struct_schema(t: &DataType) -> SchemaRef {
    match t {
        DataType::Struct(fields) => Arc::new(Schema::new(fields.clone())),
        _ => Arc::new(Schema::empty()),
    }
}
