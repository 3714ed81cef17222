"""One module per file format. Readers turn files into model records; they never judge values."""
