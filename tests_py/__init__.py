"""ctrlrun's Python test suite (a package, so that test modules in different folders may share
a file name and import ``tests_py.support`` by its name)."""
