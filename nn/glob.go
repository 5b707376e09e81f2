package nn

import "path"

// pathMatch is path.Match over one name part (a part holds no '/').
func pathMatch(pattern, name string) (bool, error) {
	ok, err := path.Match(pattern, name)
	if err != nil {
		return false, errBadPattern
	}
	return ok, nil
}
