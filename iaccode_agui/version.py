"""The package version, in a module of its own so that lower layers can name it without importing the
package root (which would pull the application in)."""
__version__ = "0.1.0"
