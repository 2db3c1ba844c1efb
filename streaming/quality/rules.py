"""The data contract of the event table (:mod:`streaming.events`) as one list of rules (:class:`Rule`).

Every rule yields the Great Expectations expectation that decides success
(:mod:`streaming.quality.gx`) *and* an equivalent Spark SQL predicate that selects the rows
failing it, so failures are reported with the rule's name and the row's ``source_position``.

What ``EVENT_RULES`` checks: kind known; per-kind required keys (row conditions on ``kind``);
offsets non-negative and ``first_offset <= last_offset`` within data spans and markers;
``producer_epoch`` in [-1, 32767] (Kafka's ``short``, -1 = no epoch); ``coordinator_epoch >= -1``;
``txn_state`` a coordinator ``TransactionState`` name; progress offsets ordered
(``log_start_offset <= lso <= high_watermark``); timestamps plausible (``first_ts``/``last_ts``
between 2010-01-01 and ``event_time`` + 1 day).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from streaming.events import KINDS
from streaming.vocab import COORDINATOR_STATES

EPOCH_MIN, EPOCH_MAX = -1, 32767  # producer epoch: -1 (none) .. Short.MAX_VALUE
MIN_TS_MS = 1_262_304_000_000  # 2010-01-01T00:00:00Z: older timestamps are not plausible for Kafka 0.11+
FUTURE_SLACK_MS = 86_400_000  # a timestamp may be at most one day ahead of the event time

EVENT_SUITE = "txnwatch_events"
# Derived column added to the event table before validation (and dropped from reported rows):
# the latest plausible timestamp of a row, event_time + 1 day in epoch ms.
TS_LIMIT = "_ts_limit_ms"
TS_LIMIT_SQL = f"unix_millis(event_time) + {FUTURE_SLACK_MS}"


def _lit(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v)


def _in(values: Iterable[Any]) -> str:
    return "(" + ", ".join(_lit(v) for v in values) + ")"


@dataclass(frozen=True)
class Rule:
    """One check of the event contract: the GX expectation and the Spark predicate of its failing rows.

    ``check``: ``not_null`` | ``in_set`` | ``between`` | ``a_ge_b`` (column >= column_b, rows
    with either null ignored).
    ``when`` is the row condition, written in the syntax common to Spark SQL and ``DataFrame.query``
    (``kind in ('data', 'marker')``). Column-map checks ignore nulls, like GX does, except
    ``not_null``.
    """

    name: str
    check: str
    description: str
    column: str | None = None
    when: str | None = None
    value_set: tuple[Any, ...] | None = None
    min_value: Any = None
    max_value: Any = None
    column_b: str | None = None

    # -- GX ---------------------------------------------------------------------------------
    def expectation(self, parser: str = "spark") -> Any:
        import great_expectations.expectations as gxe

        kw: dict[str, Any] = {"meta": {"rule": self.name, "description": self.description}}
        if self.when:
            kw.update(row_condition=self.when, condition_parser=parser)
        with warnings.catch_warnings():
            # string row conditions are deprecated since GX 1.9 in favour of Condition objects,
            # but are the only form shared by the Spark and pandas engines and our own filters.
            warnings.simplefilter("ignore", DeprecationWarning)
            if self.check == "not_null":
                return gxe.ExpectColumnValuesToNotBeNull(column=self.column, **kw)
            if self.check == "in_set":
                return gxe.ExpectColumnValuesToBeInSet(column=self.column, value_set=list(self.value_set or ()),
                                                       **kw)
            if self.check == "between":
                return gxe.ExpectColumnValuesToBeBetween(column=self.column, min_value=self.min_value,
                                                         max_value=self.max_value, **kw)
            if self.check == "a_ge_b":
                return gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                    column_A=self.column, column_B=self.column_b, or_equal=True,
                    ignore_row_if="either_value_is_missing", **kw)
        raise ValueError(f"rule {self.name}: unknown check {self.check!r}")

    # -- the same rule as a Spark SQL predicate selecting the failing rows -------------------
    def failing_predicate(self) -> str:
        c = f"`{self.column}`" if self.column else None
        if self.check == "not_null":
            bad = f"{c} IS NULL"
        elif self.check == "in_set":
            bad = f"{c} IS NOT NULL AND NOT ({c} IN {_in(self.value_set or ())})"
        elif self.check == "between":
            parts = []
            if self.min_value is not None:
                parts.append(f"{c} < {_lit(self.min_value)}")
            if self.max_value is not None:
                parts.append(f"{c} > {_lit(self.max_value)}")
            bad = f"{c} IS NOT NULL AND ({' OR '.join(parts)})"
        elif self.check == "a_ge_b":
            b = f"`{self.column_b}`"
            bad = f"{c} IS NOT NULL AND {b} IS NOT NULL AND NOT ({c} >= {b})"
        else:
            raise ValueError(f"rule {self.name}: unknown check {self.check!r}")
        return f"({self.when}) AND ({bad})" if self.when else bad


def _kinds(*kinds: str) -> str:
    """Row condition valid both as Spark SQL and as ``DataFrame.query``."""
    return f"kind == {_lit(kinds[0])}" if len(kinds) == 1 else f"kind in {_in(kinds)}"


def _event_rules() -> tuple[Rule, ...]:
    r: list[Rule] = [
        Rule("kind.not_null", "not_null", "every event has a kind", column="kind"),
        Rule("kind.known", "in_set", f"kind is one of {', '.join(KINDS)}", column="kind", value_set=KINDS),
        Rule("event_time.not_null", "not_null", "every event carries the observation time (watermark)",
             column="event_time"),
    ]
    for col in ("topic", "partition", "producer_id", "first_offset", "last_offset"):
        r.append(Rule(f"span.{col}.not_null", "not_null", f"data spans and markers have {col}", column=col,
                      when=_kinds("data", "marker")))
    r += [
        Rule("span.producer_id.non_negative", "between", "producer_id >= 0 in data spans and markers",
             column="producer_id", when=_kinds("data", "marker"), min_value=0),
        Rule("marker.marker.not_null", "not_null", "a marker row names its control type", column="marker",
             when=_kinds("marker")),
        Rule("txn_state.transactional_id.not_null", "not_null", "coordinator records have a transactional id",
             column="transactional_id", when=_kinds("txn_state")),
        Rule("txn_state.coordinator_epoch.not_null", "not_null",
             "coordinator records carry the coordinator epoch (partitionLeaderEpoch)",
             column="coordinator_epoch", when=_kinds("txn_state")),
        Rule("txn_state.state.known", "in_set", "txn_state is a coordinator TransactionState name",
             column="txn_state", when=_kinds("txn_state"), value_set=COORDINATOR_STATES),
        Rule("progress.topic.not_null", "not_null", "progress rows name their topic", column="topic",
             when=_kinds("progress")),
        Rule("progress.partition.not_null", "not_null", "progress rows name their partition", column="partition",
             when=_kinds("progress")),
        Rule("gap.reason.not_null", "not_null", "gap rows say why bytes are missing", column="reason",
             when=_kinds("gap")),
        Rule("partition.non_negative", "between", "partition >= 0", column="partition", min_value=0),
    ]
    for col in ("first_offset", "last_offset"):
        r.append(Rule(f"offsets.{col}.non_negative", "between", f"{col} >= 0", column=col,
                      when=_kinds("data", "marker", "txn_state", "snapshot"), min_value=0))
    r += [
        Rule("span.first_le_last", "a_ge_b", "first_offset <= last_offset within a span or marker",
             column="last_offset", column_b="first_offset", when=_kinds("data", "marker")),
        Rule("producer_epoch.range", "between", f"producer_epoch in [{EPOCH_MIN}, {EPOCH_MAX}]",
             column="producer_epoch", min_value=EPOCH_MIN, max_value=EPOCH_MAX),
        Rule("coordinator_epoch.range", "between", "coordinator_epoch >= -1", column="coordinator_epoch",
             min_value=-1),
    ]
    for col in ("high_watermark", "lso", "log_start_offset"):
        r.append(Rule(f"progress.{col}.non_negative", "between", f"{col} >= 0", column=col,
                      when=_kinds("progress"), min_value=0))
    r += [
        Rule("progress.lso_le_high_watermark", "a_ge_b", "lso <= high_watermark", column="high_watermark",
             column_b="lso", when=_kinds("progress")),
        Rule("progress.log_start_le_high_watermark", "a_ge_b", "log_start_offset <= high_watermark",
             column="high_watermark", column_b="log_start_offset", when=_kinds("progress")),
    ]
    for col in ("first_ts", "last_ts"):
        r += [
            Rule(f"timestamps.{col}.after_2010", "between", f"{col} >= 2010-01-01", column=col,
                 min_value=MIN_TS_MS),
            Rule(f"timestamps.{col}.before_event_time_plus_1d", "a_ge_b", f"{col} <= event_time + 1 day",
                 column=TS_LIMIT, column_b=col),
        ]
    return tuple(r)


EVENT_RULES: tuple[Rule, ...] = _event_rules()
