"""`msoverflow hunt`: watch a PyNative run live (instrument.py runs inside it; session.py drives it)."""
