"""Helpers shared by the tests: fixture models, CLI runners, stub servers, spec writers."""
