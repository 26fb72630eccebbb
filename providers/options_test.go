package providers

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// The leader election timing flags: Kubernetes' defaults, and a clear
// error for timings client-go's elector would refuse.
func TestLeaderElectionTiming(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.LeaseDuration != 15*time.Second || o.RenewDeadline != 10*time.Second || o.RetryPeriod != 2*time.Second {
		t.Errorf("defaults %s/%s/%s, want 15s/10s/2s", o.LeaseDuration, o.RenewDeadline, o.RetryPeriod)
	}
	if err := o.validateLeaderElection(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string // in the error; empty: valid
	}{
		{[]string{"--leader-elect-lease-duration=6s", "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s"}, ""},
		{[]string{"--leader-elect-lease-duration=10s", "--leader-elect-renew-deadline=10s"}, "--leader-elect-renew-deadline (10s) must be shorter"},
		{[]string{"--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"}, "must be longer than 1.2 times --leader-elect-retry-period"},
	} {
		var o Options
		fs := flag.NewFlagSet("manager", flag.ContinueOnError)
		o.BindFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.validateLeaderElection()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
}
