"""CPU per key of the conversion PySpark's ``applyInPandasWithState`` worker does, by input shape.

Run: ``PYTHONPATH=. .venv/bin/python bench/state_key_cost.py [--keys 2000]``

PySpark's worker (``pyspark/worker.py``, the ``SQL_GROUPED_MAP_PANDAS_UDF_WITH_STATE`` branch:
``gen_data_and_state`` / ``apply_udf_to_group``) slices each key's rows out of the Arrow batch,
converts every column of the slice to a pandas Series (``ArrowBatchTransformer.to_pandas``) and
``pd.concat``s them into the frame the state function gets. This replays that per-key step in
process (no Spark) on ``--keys`` keys of two events each (a data span and its COMMIT marker, as
``bench/state_size.py`` writes them), for the input shapes considered for ``microbatch.detect``:

* the 43 event columns (what ``detect`` handed over before issue 23),
* the key plus one struct column of the event fields (``struct_in_pandas="dict"``),
* the key plus one JSON string of the event fields,
* the key, ``event_time`` and the JSON string (what ``detect`` hands over now: the watermarked
  column must be in the operator's input),

and the last one followed by the state function's own work (``microbatch.spark_state_fn``'s
decoding and ``state_rows``) and the state row PySpark builds per key (``construct_state_pdf``).
Prints ms of CPU (``time.process_time``) per key for each.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=2000)
    args = ap.parse_args(argv)

    import numpy as np
    import pandas as pd
    import pyarrow as pa
    from pyspark.serializers import CPickleSerializer
    from pyspark.sql.conversion import ArrowBatchTransformer
    from pyspark.sql.types import StringType, StructField, StructType

    from streaming.events import arrow_schema
    from streaming.microbatch import OUT_PACKED, LocalGroupState, pack_out_rows, packed_event_rows, state_rows
    from streaming.state_machine import EngineConfig

    n_keys = args.keys
    schema = arrow_schema()
    n = 2 * n_keys
    pid = np.repeat(np.arange(1, n_keys + 1, dtype=np.int64), 2)
    is_m = np.tile([False, True], n_keys)
    ts = 1_700_000_000_000
    cols = {
        "kind": np.where(is_m, "marker", "data").astype(object), "source": np.full(n, "synthetic", object),
        "cluster": np.full(n, "default", object), "topic": np.full(n, "scale", object),
        "partition": (pid % 1000).astype(np.int32), "route_pid": pid, "producer_id": pid,
        "producer_epoch": np.zeros(n, np.int32), "first_offset": np.arange(n), "last_offset": np.arange(n),
        "first_ts": np.full(n, ts), "last_ts": np.full(n, ts), "batch_count": np.ones(n, np.int64),
        "record_count": np.where(is_m, 1, 3), "bytes": np.full(n, 120), "empty_batches": np.zeros(n, np.int64),
        "marker": np.where(is_m, "COMMIT", None).astype(object),
        "coordinator_epoch": pa.array(np.zeros(n, np.int32), mask=~is_m),
        "from_log_start": np.ones(n, bool), "read_from_zero": np.ones(n, bool),
        "source_position": np.full(n, "synthetic", object),
        "event_time": pa.array(np.full(n, ts * 1000), type=pa.timestamp("us", tz="UTC")),
    }
    arrays = [pa.nulls(n, f.type) if cols.get(f.name) is None else pa.array(cols[f.name], type=f.type)
              for f in schema]
    names = [f.name for f in schema]
    key = arrays[names.index("route_pid")]
    event_time = arrays[names.index("event_time")]
    # the JSON microbatch.pack_events has Spark write: null fields left out, event_time as ms
    packed = []
    for r in pa.Table.from_arrays(arrays, schema=schema).to_pylist():
        d = {k: v for k, v in r.items() if v is not None and k != "event_time"}
        d["event_time_ms"] = ts
        packed.append(json.dumps(d, separators=(",", ":")))
    shapes = {
        "43 event columns": pa.RecordBatch.from_arrays(arrays, schema=schema),
        "key + struct of the event fields": pa.RecordBatch.from_arrays(
            [key, pa.StructArray.from_arrays(arrays, fields=list(schema))], names=["route_pid", "ev"]),
        "key + JSON": pa.RecordBatch.from_arrays([key, pa.array(packed)], names=["route_pid", "ev"]),
        "key + event_time + JSON (detect now)": pa.RecordBatch.from_arrays(
            [key, event_time, pa.array(packed)], names=["route_pid", "event_time", "ev"]),
    }

    def frames(batch: pa.RecordBatch):
        """Per key, what the worker does before calling the state function."""
        for k in range(n_keys):
            series = ArrowBatchTransformer.to_pandas(batch.slice(2 * k, 2), timezone="UTC", struct_in_pandas="dict",
                                                     ndarray_as_list=False, prefer_int_ext_dtype=False,
                                                     df_for_struct=False)
            yield k + 1, pd.concat(series, axis=1)

    print(f"per-key CPU of PySpark's applyInPandasWithState conversion, {n_keys:,} keys of 2 events; "
          f"load average {os.getloadavg()[0]:.2f}")
    for label, batch in shapes.items():
        t0 = time.process_time()
        for _k, _df in frames(batch):
            pass
        print(f"  {label:<40} {1000 * (time.process_time() - t0) / n_keys:7.3f} ms per key")

    cfg = EngineConfig(cluster="default")
    pickle = CPickleSerializer()
    value_schema = StructType([StructField("doc", StringType())])
    t0 = time.process_time()
    for k, df in frames(shapes["key + event_time + JSON (detect now)"]):
        st = LocalGroupState(None, 0)
        rows = state_rows(cfg, k, packed_event_rows(k, df["ev"].tolist()), st)
        if rows:  # spark_state_fn's output frame: one JSON column (microbatch.OUT_PACKED)
            pd.DataFrame({OUT_PACKED: pack_out_rows(rows)})
        # PySpark's construct_state_pdf: the state row pickled, one single-row frame per key
        obj = pickle.dumps(value_schema.toInternal(st.get)) if st.exists else None
        pd.DataFrame.from_dict({"properties": [b"{}"], "keyRowAsUnsafe": [b""], "object": [obj],
                                "oldTimeoutTimestamp": [-1]})
    print(f"  {'the same + state function + state row':<40} "
          f"{1000 * (time.process_time() - t0) / n_keys:7.3f} ms per key")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
