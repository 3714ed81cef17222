"""Diagnosis: which non-finite values are faults, and what caused them (runs after the findings are decided)."""
