"""The survey's experiments beyond the table: dynamic shapes, roofline, overhead, noise."""
