package main

import "fmt"

// TEMPORARY until the launch branch merges.
type launchInfo struct {
	Launcher                           string
	Rank, World, LocalRank, LocalWorld int
	MasterAddr                         string
	MasterPort                         int
	Token, RunID                       string
	StoreFD                            int
}

func detectLaunch(getenv func(string) string) (*launchInfo, error) {
	if getenv("RANK") == "" {
		return nil, nil
	}
	li := &launchInfo{MasterAddr: getenv("MASTER_ADDR"), Token: getenv("PPC_RUN_TOKEN"), StoreFD: -1}
	fmtSscan(getenv("RANK"), &li.Rank)
	fmtSscan(getenv("WORLD_SIZE"), &li.World)
	fmtSscan(getenv("MASTER_PORT"), &li.MasterPort)
	if getenv("PPC_STORE_FD") != "" {
		fmtSscan(getenv("PPC_STORE_FD"), &li.StoreFD)
	}
	return li, nil
}

func fmtSscan(s string, v *int) { fmt.Sscan(s, v) }
