"""The worker process: one cell, measured (``python -m compare.worker SPEC RESULT``)."""
