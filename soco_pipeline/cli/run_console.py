"""The console logger of the runs `make demo` and `soco run` launch: Dagster's lines less its notes on skipped
missing partitions (`DAGSTER_NOTES`, the boards' `allow_missing_partitions` inputs), which stay in the run's
event log."""

from __future__ import annotations

import logging
import sys

import dagster as dg

# Dagster's WARNING messages about intended behaviour: kept in the run's log, not printed
DAGSTER_NOTES = ("Couldn't load partition",)
FORMAT = "%(asctime)s - dagster - %(levelname)s - %(message)s"


class DropDagsterNotes(logging.Filter):
    """Drop the records below ERROR whose message is one of DAGSTER_NOTES."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a note (not printed), True for every other record."""
        meta = getattr(record, "dagster_meta", None) or {}
        text = str(meta.get("orig_message") or record.getMessage())
        return record.levelno >= logging.ERROR or not any(note in text for note in DAGSTER_NOTES)


@dg.logger(
    config_schema={
        "log_level": dg.Field(str, is_required=False, default_value="INFO"),
        "name": dg.Field(str, is_required=False, default_value="dagster"),
    },
    description="Dagster's console lines on stderr, less the notes in run_console.DAGSTER_NOTES.",
)
def soco_console(init_context: dg.InitLoggerContext) -> logging.Logger:
    """A logger printing to stderr at `log_level`, with `DropDagsterNotes` on its handler."""
    level = init_context.logger_config["log_level"].upper()
    out = logging.Logger(init_context.logger_config["name"], level=level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(DropDagsterNotes())
    out.addHandler(handler)
    return out
