"""Running a plan: the parent's runner, its executors (local, Ray), worker processes and the protocol between them."""
