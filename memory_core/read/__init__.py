"""The read path's parts: hard filters, ranking, packing, the access log and read indices.

``memory_core.recall`` puts them together; nothing here imports Prefect or DuckDB.
"""
