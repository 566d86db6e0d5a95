package main

import "github.com/spf13/cobra"

func newDiff(g *globals) *cobra.Command { return &cobra.Command{Use: "diff", Hidden: true} }
