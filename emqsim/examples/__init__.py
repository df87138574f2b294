"""Small, complete examples that the docs include and the tests run."""
