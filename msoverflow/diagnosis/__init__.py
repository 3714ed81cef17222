"""Diagnosis of an origin: what caused its bad value (recomputation, layout of the bad elements, replicas)."""
