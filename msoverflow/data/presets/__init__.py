"""Package data (kept a package so setuptools installs it and importlib.resources finds it)."""
