"""The lab and page-views benchmarks on Apache Spark 3.5.1, printing the same
JSON fields as `weir-bench`, so the two can be run side by side.

Run through scripts/spark_bench.sh (it makes the venv). local[2], shuffle
partitions 2, the rate-micro-batch source, the noop sink, a checkpoint.

`kafka`: the seed's pipeline as scripts/kafka_bench.sh runs it on weir, on
the topic $KAFKA_TOPIC at $KAFKA_BOOTSTRAP (Kafka -> from_json -> 2-minute
watermark -> 1-minute page views, update mode -> Kafka topic
$KAFKA_OUT_TOPIC; Spark's Kafka sink is at least once), availableNow with
maxOffsetsPerTrigger $MAX_OFFSETS (default 200000), through
spark-sql-kafka-0-10_2.12:3.5.1 from Maven Central. Prints events/s over
the batches that read rows, as kafka_bench.sh does for weir.
"""
import json
import os
import sys
import tempfile
import time

T0 = time.time()

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402


def jvm_peak_rss_mb():
    """VmHWM of the JVM child processes (the py4j gateway)."""
    best = 0.0
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                st = f.read()
            if f"PPid:\t{me}" not in st:
                continue
            for line in st.splitlines():
                if line.startswith("VmHWM:"):
                    best = max(best, int(line.split()[1]) / 1024.0)
        except OSError:
            pass
    return best


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[int(round((len(v) - 1) * p))]


def main():
    scenario = sys.argv[1] if len(sys.argv) > 1 else "lab"
    batches = int(os.environ.get("BATCHES", "50" if scenario == "lab" else "60"))
    rows = int(os.environ.get("ROWS_PER_BATCH", "200000" if scenario == "lab" else "100000"))
    builder = (SparkSession.builder.master("local[2]").appName(f"weir-bench-{scenario}")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    if scenario == "kafka":
        builder = builder.config("spark.jars.packages",
                                 "org.apache.spark:spark-sql-kafka-0-10_2.12:3.5.1")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if scenario == "kafka":
        return kafka(spark)
    src = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows)
           .option("advanceMillisPerBatch", 1000 if scenario == "lab" else 10000).load())
    if scenario == "lab":
        q = (src.withWatermark("timestamp", "10 seconds")
             .groupBy(F.window("timestamp", "10 seconds")).agg(F.count("*").alias("n")))
    elif scenario == "page_views":
        ev = src.select(
            F.concat(F.lit("/page/"), (F.col("value") * 7919 % 1000).cast("string")).alias("page"),
            (F.col("timestamp") - F.expr("make_interval(0,0,0,0,0,0, (value * 104729 % 90))")).alias("event_ts"))
        q = (ev.withWatermark("event_ts", "2 minutes")
             .groupBy(F.window("event_ts", "1 minute"), "page").agg(F.count("*").alias("views")))
    else:
        raise SystemExit(f"unknown scenario {scenario} (lab, page_views, kafka)")
    chk = tempfile.mkdtemp(prefix="spark-bench-chk-")
    t0 = time.time()
    query = (q.writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", chk).start())
    first = None
    progress = []
    seen = set()
    while True:
        for p in query.recentProgress:
            if p["batchId"] not in seen:
                seen.add(p["batchId"])
                progress.append(p)
                if first is None:
                    first = time.time()
        if len([p for p in progress if p["numInputRows"] > 0]) >= batches:
            break
        time.sleep(0.05)
    secs = time.time() - t0
    query.stop()
    data = [p for p in progress if p["numInputRows"] > 0][:batches]
    total, busy, lat = batch_figures(data)
    print(json.dumps({
        "scenario": scenario, "engine": "spark-3.5.1", "rows": total, "seconds": secs,
        "rows_per_sec": total / secs, "rows_per_busy_sec": total / max(busy, 1e-9),
        "batches": len(data), "latency_ms_p50": pct(lat, 0.5), "latency_ms_p99": pct(lat, 0.99),
        "peak_rss_mb": jvm_peak_rss_mb(),
        "ms_from_process_start_to_first_batch": (first - T0) * 1000.0 if first else None,
        "rows_per_batch": rows,
    }))
    spark.stop()


def batch_figures(data):
    """Rows, busy seconds and per-batch latencies (ms) of progress entries."""
    lat = [p["durationMs"]["triggerExecution"] for p in data]
    return sum(p["numInputRows"] for p in data), sum(lat) / 1000.0, lat


def kafka(spark):
    """The seed's Kafka pipeline over a finished topic, availableNow."""
    topic = os.environ["KAFKA_TOPIC"]
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    max_offsets = int(os.environ.get("MAX_OFFSETS", "200000"))
    out = os.environ.get("KAFKA_OUT_TOPIC", f"{topic}-spark-views")
    schema = "page STRING, event_ts TIMESTAMP, user STRING"
    clicks = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", max_offsets)
              .load()
              .select(F.from_json(F.col("value").cast("string"), schema).alias("c"))
              .select("c.*"))
    views = (clicks.withWatermark("event_ts", "2 minutes")
             .groupBy(F.window("event_ts", "1 minute"), "page")
             .agg(F.count("*").alias("views")))
    chk = tempfile.mkdtemp(prefix="spark-bench-kafka-chk-")
    t0 = time.time()
    query = (views.select(F.col("page").alias("key"), F.to_json(F.struct("*")).alias("value"))
             .writeStream.format("kafka")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("topic", out)
             .outputMode("update")
             .option("checkpointLocation", chk)
             .trigger(availableNow=True)
             .start())
    query.awaitTermination()
    wall = time.time() - t0
    if len(query.recentProgress) >= 100:
        print("warning: Spark keeps the last 100 batches' progress: the figures below "
              "leave out earlier batches (raise MAX_OFFSETS)", file=sys.stderr)
    data = [p for p in query.recentProgress if p["numInputRows"] > 0]
    total, busy, lat = batch_figures(data)
    phases = {}
    for p in data:
        for k, v in p["durationMs"].items():
            phases[k] = phases.get(k, 0) + v
    print(json.dumps({
        "scenario": "kafka", "engine": "spark-3.5.1", "topic": topic, "events": total,
        "batches": len(data), "max_offsets_per_trigger": max_offsets,
        "events_per_sec_in_batches": total / max(busy, 1e-9),
        "events_per_sec_wall": total / wall, "latency_ms_p50": pct(lat, 0.5),
        "phases_ms": phases, "peak_rss_mb": jvm_peak_rss_mb(),
    }))
    spark.stop()


if __name__ == "__main__":
    main()
