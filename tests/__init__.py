"""The test suite: unit/ (in-process, fast), cli/ (commands end to end on written dumps), real/ (real MindSpore
runs and installs), fuzz/, browser/; support/ holds the fixture writers and case models they share."""
