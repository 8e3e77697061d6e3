package procfs

import "strings"

// BootID returns the kernel's boot id; it changes on every boot, so a
// recorded (pid, start time) from another boot names nothing alive.
func BootID() (string, error) {
	b, err := ReadFile(root+"/sys/kernel/random/boot_id", MaxNumbers)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
