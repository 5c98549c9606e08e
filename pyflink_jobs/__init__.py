"""PyFlink jobs and the glue that wires streamplace into a job (Kafka source/sink, executor)."""
