"""The tests of iaccode_agui, by harness level (see docs/tests.rst)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
