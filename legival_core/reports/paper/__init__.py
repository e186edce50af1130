"""The two papers' tables and figures as pure functions of the computed tables (`tables.paper_tables`:
`figures` for the Legi-Val paper's figures, `gcot` for the gCoT paper's analyses, `rewards` for the RM
correlations with transfer utility).
"""
