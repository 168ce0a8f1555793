"""The engine contract: what every engine implements and the rules built on it."""
