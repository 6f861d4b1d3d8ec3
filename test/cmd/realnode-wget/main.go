// wget: the subset of busybox wget that the NATS probes use
// (wget -q -T SECONDS -O FILE URL); exits 1 on a transport or HTTP error.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	timeout, out, url := 10*time.Second, "-", ""
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-q":
		case "-T":
			i++
			if s, err := strconv.Atoi(args[i]); err == nil {
				timeout = time.Duration(s) * time.Second
			}
		case "-O":
			i++
			out = args[i]
		default:
			url = a
		}
	}
	resp, err := (&http.Client{Timeout: timeout}).Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wget:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	w := io.Writer(os.Stdout)
	if out != "-" {
		f, err := os.Create(out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "wget:", err)
			os.Exit(1)
		}
		defer f.Close()
		w = f
	}
	_, _ = io.Copy(w, resp.Body)
	if resp.StatusCode >= 400 {
		fmt.Fprintln(os.Stderr, "wget: server returned", resp.Status)
		os.Exit(1)
	}
}
