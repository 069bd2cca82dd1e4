"""Datasets in one record format, the generated arithmetic problems and the benchmarks shipped as package data."""
