"""What the whole-model report page reads from the report (:mod:`qcore.report`): the page
draws, the report computes; the page reaches the report only through here."""

from __future__ import annotations

from qcore.report import list_tensors
from qcore.report.core import (
    read_rows,
    run_report,
    select,
    sqnr_matrix,
    summarize,
    tensor_labels,
)
from qcore.report.synthetic import write_checkpoint

__all__ = ["list_tensors", "read_rows", "run_report", "select", "sqnr_matrix", "summarize",
           "tensor_labels", "write_checkpoint"]
