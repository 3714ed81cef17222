"""Which non-finite values are no fault: contained masks and the overflows a loss scale handled (runs before the
findings are decided)."""
