// Package procfs reads what the kernel says of processes under /proc
// (proc(5)).
package procfs

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// StatFields are the fields of <proc>/<pid>/stat that follow the command
// name, which is in parentheses and may itself hold spaces and
// parentheses: [0] is the state (proc(5)'s field 3), [1] the parent's pid
// (field 4), [19] the start time (field 22).
func StatFields(proc string, pid int) ([]string, bool) {
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(raw[i+1:])), true
}

// Tree is root and every process descended from it, root first, as
// <proc> lists them now.
func Tree(proc string, root int) []int {
	entries, _ := os.ReadDir(proc)
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fields, ok := StatFields(proc, pid)
		if !ok || len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	tree := []int{root}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}
