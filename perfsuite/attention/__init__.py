"""The attention problem: cases, case sets, masks, inputs, modes, the float64 reference, the cost model, the function contract."""
