"""Results as plain data: the schema, derived figures, the machine, history."""
