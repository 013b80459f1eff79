"""Reports: they read results and never measure."""
