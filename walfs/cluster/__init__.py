"""The Kafka-cluster engine: walfs over a real Kafka cluster."""
