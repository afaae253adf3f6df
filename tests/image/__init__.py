"""The container image `make image` builds, tested from its own files
(`make image-test`)."""
