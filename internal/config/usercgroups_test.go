package config

import (
	"io"
	"strings"
	"testing"
)

func TestUserCgroups(t *testing.T) {
	for _, v := range []string{"none", DefaultUserCgroups, "/sys/fs/cgroup/users/%U", "/sys/fs/cgroup/shared"} {
		c, err := load([]string{"--user-cgroups", v}, io.Discard)
		if err != nil || c.UserCgroups != v {
			t.Errorf("--user-cgroups %q: %q, %v", v, c.UserCgroups, err)
		}
	}
	for _, v := range []string{"", "off", "user.slice/user-%U.slice", "/sys/fs/cgroup/../%U", "/sys/fs/cgroup/user-%u", "/x/%U/"} {
		if _, err := load([]string{"--user-cgroups", v}, io.Discard); err == nil || !strings.Contains(err.Error(), "--user-cgroups") {
			t.Errorf("--user-cgroups %q: %v, want refused", v, err)
		}
	}
	if Default().UserCgroups != DefaultUserCgroups {
		t.Errorf("default --user-cgroups %q", Default().UserCgroups)
	}
}
