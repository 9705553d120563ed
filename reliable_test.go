package prioq

const helperEnv = "PRIOQ_TEST_HELPER"

func runHelperProcess() int { return 2 }
