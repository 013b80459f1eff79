"""TVM (Relax + MetaSchedule) as two backends, ``tvm-untuned`` and ``tvm``, by role:
``backend`` (lowering, building, running, profiling), ``tuning`` (MetaSchedule's search
within a budget), ``log_store`` (the tuning logs on disk, locked and validated),
``schedules`` (default CPU schedules for kernels without a record), ``fast_math`` (the
vectorizable math passes) and ``inspection`` (what MetaSchedule measured, for the cell)."""
from .backend import TvmBackend, TvmOptions, TvmUntunedBackend

__all__ = ["TvmBackend", "TvmOptions", "TvmUntunedBackend"]
