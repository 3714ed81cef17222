"""Real MindSpore 2.10 CPU runs (single rank, msrun, msprobe) and real installs; the slow part of the suite."""
