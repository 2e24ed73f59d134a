"""What actors and the learner share about the agent: networks, action distributions, NumPy inference
and the conversion of weights between the two. Imports only `levelray.contracts`."""
