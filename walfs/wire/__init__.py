"""The Kafka record-batch codec, shared by the Kafka face and the cluster engine."""
