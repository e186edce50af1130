"""How a flow's run ends on the Prefect side: the cancel a run reads from Prefect's API
(`cancel_watch`) and the processes a run starts and owns (`processes`: the temporary Prefect server)."""
