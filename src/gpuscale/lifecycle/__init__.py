"""Pending → running phase tracing, one schema for the twin and real clusters."""
