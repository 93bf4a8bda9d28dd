"""Shared by every test directory: this file puts ``tests/`` on the import path, so that
``from deadline import wait_until`` works in unit, integration and system tests alike."""
